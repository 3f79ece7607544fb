"""The output folder of `hf-neutreno compare`: what exists is kept until its replacement is complete.

`--output-dir` holds a complete run (or nothing). A run in progress is written beside it, to
`<output-dir>.incomplete`: `results.json` is rewritten after every finished run (variant, seed), each model folder
appears only once complete, and at the end the folder is swapped in for `--output-dir`. So a run stopped at any
moment (Ctrl-C, SIGKILL, a power cut) leaves the earlier complete run in place and its own finished runs on disk;
`--resume` continues them, and without it they are not overwritten.
"""

import dataclasses
import json
import math
import os
import shutil
from pathlib import Path

COMMAND = "hf-neutreno compare"
# 3: variants chosen with --variants, the baseline named `softmax`; summaries with per-seed values, n and wins
FORMAT_VERSION = 3
RESULTS_FILE, PLOT_FILE = "results.json", "comparison.png"
PARTIAL = ".partial."  # prefix of an entry being written; it is renamed to its real name once complete
INCOMPLETE, REPLACED = ".incomplete", ".replaced"  # suffixes of the folders beside --output-dir
UNCOMPARED_SETTINGS = ("output_dir", "no_progress", "verbose", "resume")  # a resumed run may differ in these
LEGACY_ENTRIES = ("baseline",)  # the softmax model's folder in format 2


def read_results(path: Path, model_dirs) -> dict | None:
    """The results.json of a compare run in folder `path` (which holds nothing else: results, plot, the model folders
    `model_dirs`, partial entries), None if it is not one."""
    try:
        results = json.loads((path / RESULTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    known = {RESULTS_FILE, PLOT_FILE, *LEGACY_ENTRIES, *model_dirs}
    entries = {p.name.removeprefix(PARTIAL) for p in path.iterdir()}
    is_run = isinstance(results, dict) and results.get("command") == COMMAND and entries <= known
    return results if is_run else None


def settings_record(settings) -> dict:
    """The settings as results.json records them (JSON types: a tuple becomes a list)."""
    return json.loads(json.dumps(dataclasses.asdict(settings)))


def settings_differences(recorded: dict, settings) -> list[str]:
    """'--flag recorded (now value)' for every setting that differs from an earlier run's (`UNCOMPARED_SETTINGS`
    aside)."""
    now = settings_record(settings)
    return [
        f"--{k.replace('_', '-')} {recorded.get(k)} (now {v})"
        for k, v in now.items()
        if k not in UNCOMPARED_SETTINGS and recorded.get(k) != v
    ]


class OutputFolders:
    """`final` (`--output-dir`), `work` (the run in progress beside it) and `replaced` (the earlier run during the
    swap). On construction, before anything is written: finishes a swap a killed run left halfway, checks that
    neither folder holds anything but a compare run, and that an interrupted run is continued (`settings.resume`,
    with the same settings: `resumed` is its results) or refused, never silently dropped (unless it finished no
    run). `finished` is the results of a complete run with these settings when `resume` finds nothing left to do."""

    def __init__(self, settings, model_dirs):
        self.final = Path(settings.output_dir).absolute()
        self.work = self.final.with_name(self.final.name + INCOMPLETE)
        self.replaced = self.final.with_name(self.final.name + REPLACED)
        self.model_dirs = tuple(model_dirs)
        self.resumed = self.finished = None
        for path in (self.work, self.replaced):  # this command's own folders: written into, so never through a link
            if path.is_symlink():
                raise ValueError(
                    f"--output-dir {settings.output_dir!r}: the folder beside it, {str(path)!r}, is a symbolic link "
                    f"(to {os.readlink(path)!r}); compare writes its run there and never through a link. Remove the "
                    "link or choose another --output-dir; nothing was written."
                )
        self._finish_swap()
        final = self._check(self.final, "--output-dir")
        work = self._check(self.work, f"--output-dir {settings.output_dir!r}: the folder beside it,")
        done = sum(len(entry["per_seed"]) for entry in (work or {}).get("variants", {}).values())
        if work is not None and not done and not settings.resume:  # stopped before any run finished: nothing to keep
            remove(self.work)
        elif work is not None:
            where = f"{settings.output_dir!r}: the interrupted run in {str(self.work)!r} ({done} runs finished)"
            if not settings.resume:
                raise ValueError(
                    f"--output-dir {where} would be lost. Pass --resume to continue it, or remove that "
                    "folder to start afresh; nothing was written."
                )
            changed = (
                settings_differences(work["settings"], settings)
                if work.get("format_version") == FORMAT_VERSION
                else [f"results format {work.get('format_version')}"]
            )
            if changed:
                raise ValueError(
                    f"--resume: --output-dir {where} had other settings: {'; '.join(changed)}. Rerun "
                    "with the same flags, or remove that folder; nothing was written."
                )
            self.resumed = work
        elif (
            settings.resume
            and final is not None
            and final.get("complete")
            and final.get("format_version") == FORMAT_VERSION
            and not settings_differences(final["settings"], settings)
        ):
            self.finished = final

    def _check(self, path: Path, flag: str) -> dict | None:
        if not path.exists():
            return None
        if not path.is_dir():
            raise ValueError(f"{flag} {str(path)!r} is a file, not a folder.")
        entries = sorted(p.name for p in path.iterdir())
        results = read_results(path, self.model_dirs) if entries else None
        if entries and results is None:
            what = "a model (config.json)" if "config.json" in entries else "files"
            shown = ", ".join(entries[:6]) + (", ..." if len(entries) > 6 else "")
            raise ValueError(
                f"{flag} {str(path)!r} already holds {what}, not an earlier `{COMMAND}` run ({shown}). "
                "Choose another --output-dir or empty this one; nothing was written."
            )
        return results

    def _finish_swap(self) -> None:
        """A run killed between the renames of `swap` left the earlier run in `replaced`: finish the swap (or, if
        the new run is somehow not complete, put the earlier one back)."""
        if not self.replaced.exists():
            return
        if not self.final.exists():
            complete = self.work.is_dir() and (read_results(self.work, self.model_dirs) or {}).get("complete")
            os.replace(self.work if complete else self.replaced, self.final)
        remove(self.replaced)

    def swap(self) -> None:
        """The complete run in `work` becomes `final`; the earlier run there is removed only after that."""
        if self.final.exists():
            os.replace(self.final, self.replaced)
        os.replace(self.work, self.final)
        remove(self.replaced)


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def write_complete(path: Path, write) -> None:
    """`write(partial_path)`, then rename it to `path`: readers see no entry or the complete one."""
    partial = path.with_name(PARTIAL + path.name)
    remove(partial)
    try:
        write(partial)
        remove(path)
        os.replace(partial, path)
    finally:
        remove(partial)


def no_nan(stats: dict) -> dict:
    """JSON has no NaN: the standard deviation of one seed is written as null."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in stats.items()}


def write_json(path: Path, data: dict) -> None:
    write_complete(path, lambda p: p.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8"))
