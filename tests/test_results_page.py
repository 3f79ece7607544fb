"""The results page of experiments/evidence/reproduce.py from fabricated unit JSON (no training): the claims' verdicts
against intervals computed by hand, the opening "which remedy" table and its sentences (round 2's units, the value paths
and segmentation included), the benchmarks' costs, and the recorded commands without this machine's data path."""

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from experiments.evidence import reproduce, reproduce_methods
from experiments.evidence import reproduce_claims as claims_data
from experiments.evidence import reproduce_page as page
from experiments.evidence import reproduce_report as report
from experiments.evidence.reproduce_plans import Unit
from experiments.evidence.reproduce_results import UnitResult, load_units

T95_TWO_DEGREES = 4.303  # Student's t, two-sided 95 %, 3 seeds
BUDGET = {
    "epochs": 1,
    "train_samples": 64,
    "test_samples": 100,
    "spectral_samples": 4,
    "corruption_samples": 8,
    "lm_steps": 2,
    "lm_batch_size": 2,
    "lm_learning_rate": 1e-3,
    "lm_warmup_steps": 1,
}
LAYERS = [0, 1, 2, 3]


def smoothing(cosine: float, hfc: float) -> dict:
    """An over-smoothing record whose last layer has this cosine similarity and ‖HFC‖/‖LFC‖."""
    return {
        "oversmoothing": {
            "values": {"cosine_similarity": [0.2, 0.3, 0.3, cosine], "hfc_lfc_ratio": [1.0, 1.0, 1.0, hfc]},
            "layers": {"cosine_similarity": LAYERS, "hfc_lfc_ratio": LAYERS},
            "num_samples": 8,
        },
        "spectral": {"smoothing": 0.75, "sharpening": 0.25, "other": 0.0, "tie": 0.0},
    }


def image_unit(unit: dict, accuracy: float, cosine: float = 0.3, hfc: float = 1.5, **extra) -> dict:
    return {
        "unit": unit,
        "accuracy": accuracy,
        "train_images": 64,
        "steps": 2,
        "budget": BUDGET,
        "seconds": 60.0,
        "load_average": [0.5, 0.7],
        "init": smoothing(0.4, 1.0),
        "trained": smoothing(cosine, hfc),
        "curve": [
            {"epoch": 1.0, "step": 1, "accuracy": accuracy - 0.1},
            {"epoch": 2.0, "step": 2, "accuracy": accuracy},
        ],
        **extra,
    }


def lm_unit(unit: dict, perplexity: float) -> dict:
    split = {p: {"perplexity": perplexity, "num_tokens": 100} for p in ("sliding", "blocks")} | {"split_tokens": 999}
    return {
        "unit": unit,
        "validation": split,
        "test": split,
        "train_loss": 6.0,
        "steps": 2,
        "train_tokens": 1024,
        "parameters": 10**6,
        "vocab_size": 100,
        "context": 256,
        "budget": BUDGET,
        "seconds": 30.0,
        "curve": [
            {"step": 1, "tokens": 511, "perplexity": 2 * perplexity},
            {"step": 2, "tokens": 511, "perplexity": perplexity},
        ],
    }


def segment_unit(unit: dict, mean_iou: float) -> dict:
    return {
        "unit": unit,
        "mean_iou": mean_iou,
        "mean_iou_ms": mean_iou + 0.01,
        "pixel_accuracy": 0.9,
        "trained": smoothing(0.5, 1.0),
        "budget": BUDGET,
        "seconds": 10.0,
    }


VIT = [0.60, 0.61, 0.62]
DIFFERENCES = {  # per seed, variant − baseline (accuracy, or perplexity, or mIoU)
    "cifar-neutreno": [-0.02, -0.025, -0.015],  # mean −0.02, std 0.005: the interval lies below zero
    "value-residual": [0.03, 0.04, 0.05],  # mean +0.04, std 0.01: above zero
    "vit-": [0.02, -0.01, 0.02],  # contains zero
    "lm-neutreno": [-10.0, -12.0, -14.0],
    "lm-value-residual": [5.0, -1.0, 2.0],
    "segment": [0.02, 0.015, 0.025],
}


def fabricated_units(chosen: float) -> list[dict]:
    units = []
    for seed, vit in enumerate(VIT):

        def cifar(variant, value, **kw):
            return image_unit(dict(kind="cifar", variant=variant, fraction=1.0, seed=seed), value, **kw)

        units += [
            cifar("vit", vit, cosine=0.2, hfc=2.0),
            cifar("neutreno", vit + DIFFERENCES["cifar-neutreno"][seed], cosine=0.3, hfc=1.5),
            cifar("vit-", vit + DIFFERENCES["vit-"][seed], cosine=0.05, hfc=4.0),
            image_unit(
                dict(kind="valuepath", task="cifar", variant="value-residual", seed=seed),
                vit + DIFFERENCES["value-residual"][seed],
                cosine=0.25,
                hfc=1.9,
            ),
            lm_unit(dict(kind="lm", variant="softmax", seed=seed), 300.0),
            lm_unit(dict(kind="lm", variant="neutreno", seed=seed), 300.0 + DIFFERENCES["lm-neutreno"][seed]),
            lm_unit(
                dict(kind="valuepath", task="lm", variant="value-residual", seed=seed),
                300.0 + DIFFERENCES["lm-value-residual"][seed],
            ),
            segment_unit(dict(kind="segment", variant="vit", seed=seed), 0.30),
            segment_unit(dict(kind="segment", variant="neutreno", seed=seed), 0.30 + DIFFERENCES["segment"][seed]),
            image_unit(
                dict(kind="parent", variant="vit", seed=seed), vit + 0.001, model_dir=f"models/cifar-vit-seed{seed}"
            ),
            image_unit(dict(kind="adapt", variant="vit", seed=seed), vit + 0.01),
            image_unit(dict(kind="adapt", variant="neutreno", seed=seed), vit + 0.02, neutreno_lambda=chosen),
        ]
        if chosen != 0.6:
            units.append(
                image_unit(
                    dict(kind="validated", neutreno_lambda=chosen, seed=seed), vit + 0.005, neutreno_lambda=chosen
                )
            )
    for lam, accuracy in ((0.2, 0.55), (0.6, 0.55 if chosen == 0.6 else 0.54)):
        units.append(image_unit(dict(kind="sweep", neutreno_lambda=lam, seed=0), accuracy, neutreno_lambda=lam))
    return units


MACHINE = {
    "device": "CPU",
    "cpu_cores": 2,
    "torch_threads_per_worker": 1,
    "workers": 1,
    "python": "3.11",
    "torch": "2.13",
    "transformers": "5.24",
}
COMMAND = (
    "python evidence/reproduce.py --budget quick --data /home/someone/private-data --out /srv/repo/benchmarks/results/x"
)


@pytest.fixture(scope="module")
def page_for(tmp_path_factory):
    """{chosen λ: (run folder, results, rendered page)} of a fabricated run, with a speed benchmark that has
    value-path rows (vit.json and the others absent: their costs are "—")."""
    benchmarks = tmp_path_factory.mktemp("benchmarks")
    (benchmarks / "value_path.json").write_text(
        json.dumps(
            {
                "rows": [
                    {
                        "shape": "vit-tiny",
                        "model": "value residual",
                        "throughput ratio": 0.97,
                        "total memory ratio": 1.0,
                    },
                    {
                        "shape": "gpt2-small",
                        "model": "value residual",
                        "throughput ratio": 1.04,
                        "total memory ratio": 1.0,
                    },
                ]
            }
        )
    )
    pages = {}

    def make(chosen: float = 0.2):
        if chosen not in pages:
            out = tmp_path_factory.mktemp(f"run-{chosen}")
            (out / "units").mkdir()
            for unit in fabricated_units(chosen):
                (out / "units" / f"{Unit.from_json(unit['unit']).name}.json").write_text(json.dumps(unit))
            (out / "run.json").write_text(
                json.dumps(
                    {
                        "budget_name": "quick",
                        "budget": BUDGET,
                        "sessions": [
                            {
                                "command": COMMAND,
                                "started": "2026-01-01 00:00:00",
                                "load_average_start": [0.1],
                                "machine": MACHINE,
                            }
                        ],
                    }
                )
            )
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(report, "BENCHMARKS", benchmarks)
                results = report.aggregate(out, chosen_lambda=chosen)
            pages[chosen] = out, results, page.render(out, results)
        return pages[chosen]

    return make


def claims_of(units: list[dict], planned: tuple = ()) -> dict:
    results = [UnitResult.from_json(unit) for unit in units]
    return {c["id"]: c for c in report.claims(report.group(results), list(planned))}


def by_hand(differences: list[float]) -> tuple[float, float]:
    mean = sum(differences) / 3
    std = math.sqrt(sum((d - mean) ** 2 for d in differences) / 2)
    half = T95_TWO_DEGREES * std / math.sqrt(3)
    return mean - half, mean + half


@pytest.mark.parametrize(
    "claim_id, differences, interval_lies, expected",
    [
        ("cifar-neutreno", "cifar-neutreno", "below 0", "opposite"),  # the paper: NeuTRENO's accuracy higher
        ("valuepath-cifar-value-residual", "value-residual", "above 0", "reproduced"),
        ("cifar-vit-minus", "vit-", "across 0", "inconclusive"),  # the poster: ViT⁻ slightly lower
        ("lm-test-blocks", "lm-neutreno", "below 0", "reproduced"),  # the paper: lower perplexity
        ("valuepath-lm-value-residual", "lm-value-residual", "across 0", "inconclusive"),
        ("segment-pretrained", "segment", "above 0", "reproduced"),
    ],
)
def test_claim_verdicts_follow_the_hand_computed_interval(claim_id, differences, interval_lies, expected):
    claim = claims_of(fabricated_units(0.2))[claim_id]
    low, high = by_hand(DIFFERENCES[differences])
    assert {"below 0": high < 0, "above 0": low > 0, "across 0": low < 0 < high}[interval_lies]
    assert claim["interval"] == pytest.approx((low, high), abs=1e-9)
    assert claim["stats"]["per_seed"] == pytest.approx(dict(zip("012", DIFFERENCES[differences])), abs=1e-9)
    assert claim["verdict"] == expected


def test_measurements_without_a_paper_direction_get_no_verdict():
    claims = claims_of(fabricated_units(0.2))
    assert claims["hfc-neutreno"]["sign"] == 0 and claims["hfc-neutreno"]["verdict"] is None
    assert claims["hfc-neutreno"]["stats"]["mean"] == pytest.approx(-0.5)  # 1.5 − 2.0 in every seed


def test_a_claim_stays_undecided_until_its_planned_seeds_are_in():
    planned = [f"cifar-neutreno-100pct-seed{s}" for s in range(5)]  # 5 planned, 3 finished
    claim = claims_of(fabricated_units(0.2), planned)["cifar-neutreno"]
    assert claim["planned"] == 5 and claim["stats"]["n"] == 3 and claim["verdict"] is None
    text = page.claims_table({"claims": [claim]})
    assert text.count("not reproduced") == 1  # the rule's explanation, not this claim
    assert "| 0/3 | not yet decided, 3 of 5 paired seeds finished |" in text
    assert "3 of 5 seeds so far" in page.opening(
        {"claims": [claim], "costs": {k: {"throughput": [], "memory": []} for k in page.METHODS}}
    )


def opening_rows(text: str) -> dict[str, list[str]]:
    section = text.split("## Which remedy, and when")[1].split("\n## ")[0]
    rows = [line.strip("|").split(" | ") for line in section.splitlines() if line.startswith("| ")]
    return {row[0].strip(): [cell.strip() for cell in row[1:]] for row in rows[1:]}


def unwrapped(text: str) -> str:
    """The page with each list item's continuation lines (broken at 120 characters) joined to it."""
    return re.sub(r"\n  (?=\S)", " ", text)


def test_opening_table_and_sentences_come_from_the_same_claims(page_for):
    text = unwrapped(page_for(0.2)[2])
    # The page opens with the which-remedy table, then the verdicts; the run and its details come after.
    claims, run = text.index("## Each claim against its paper"), text.index("## The run")
    assert text.index("## Which remedy, and when") < claims < run
    rows = opening_rows(text)
    official = rows["NeuTRENO at the official λ (ViT 0.6, LM 0.4)"]
    # columns: scratch, adaptation, 10 %, WikiText-2, segmentation, cosine Δ, ‖HFC‖/‖LFC‖ Δ, throughput, memory
    assert official[0] == "-2.00 ± 0.50 pp, 0/3 better, opposite"
    assert official[1] == "not run"  # the sweep chose 0.2: adaptation ran at 0.2, not at 0.6
    assert official[3] == "-12.0 ± 2.0, 3/3 lower, reproduced"
    assert official[4] == "+2.00 ± 0.50 points, 3/3 better, reproduced"
    assert official[5] == "+0.100 ± 0.000 (0/3 lower)" and official[6] == "-0.500 ± 0.000 (0/3 higher)"
    assert official[7] == official[8] == "—"  # vit.json and gpt.json absent
    validated = rows["NeuTRENO at the validated λ"]
    assert validated[0] == "+0.50 ± 0.00 pp, 3/3 better, reproduced"
    assert validated[1] == "+1.00 ± 0.00 pp, 3/3 better, reproduced"
    residual = rows["value residual (fixed mix)"]
    assert residual[0] == "+4.00 ± 1.00 pp, 3/3 better, reproduced" and residual[3].endswith("inconclusive")
    assert residual[7] == "0.97 × (ViT), 1.04 × (LM)" and residual[8] == "1.00 × (ViT), 1.00 × (LM)"
    assert rows["NeuTRENO, learnable λ"][:5] == ["not run"] * 5
    minus = rows["ViT⁻"]
    assert minus[1] == minus[3] == "not applicable" and minus[2] == "not run" and minus[0].endswith("inconclusive")
    sentences = {
        line.split("**")[1]: line.split("**: ")[1]
        for line in text.splitlines()
        if line.startswith("- **") and "**: " in line and line.split("**")[1] in rows
    }
    assert sentences["NeuTRENO at the official λ (ViT 0.6, LM 0.4)"] == (
        "behind the ViT on CIFAR-10 from scratch (opposite, 0/3 better); ahead of the softmax LM on WikiText-2 "
        "(reproduced, 3/3 lower); ahead of the ViT encoder in segmentation (reproduced, 3/3 better)."
    )
    assert sentences["value residual (fixed mix)"] == (
        "ahead of the ViT on CIFAR-10 from scratch (reproduced, 3/3 better); no clear difference from the softmax "
        "LM on WikiText-2 (inconclusive, 1/3 lower)."
    )
    assert sentences["NeuTRENO, learnable λ"] == "no task has a result yet."


def test_when_the_sweep_chooses_the_official_lambda_both_neutreno_rows_show_the_same_models(page_for):
    _, results, text = page_for(0.6)
    assert results["lambda_sweep"]["chosen"] == 0.6
    rows = opening_rows(text)
    official = rows["NeuTRENO at the official λ (ViT 0.6, LM 0.4)"]
    validated = rows["NeuTRENO at the validated λ (0.6: the same models as the row above)"]
    assert validated[0] == official[0] == "-2.00 ± 0.50 pp, 0/3 better, opposite"
    assert validated[1] == official[1] == "+1.00 ± 0.00 pp, 3/3 better, reproduced"  # adaptation at 0.6
    assert validated[3] == "not run"  # the sweep chose a λ for the ViT, not for the language model


def test_round_two_and_new_variants_have_their_tables_and_curves(page_for):
    out, _, text = page_for(0.2)
    assert "**Chosen: λ = 0.2.**" in text and "| λ 0.2 (chosen) |" in text
    assert "| value residual ViT | 65.00 ± 2.00 (63.00 / 65.00 / 67.00) | — |" in text
    assert "| NeuTRENO ViT (validated λ) | 61.50 ± 1.00 (60.50 / 61.50 / 62.50) | — |" in text
    assert "| ViT, seed 1 | 61.10 | 61.00 | +0.10 | [models/cifar-vit-seed1](./models/cifar-vit-seed1) |" in text
    assert "| Δ NeuTRENO encoder, trained − ViT encoder, trained | +2.00 ± 0.50 (3/3 better) |" in text
    assert "| Δ value residual − softmax (λ 0) | +2.0 ± 3.0 (1/3 lower) |" in text
    for figure in ("cifar10_curves", "wikitext2_curves", "lambda_sweep_curves", "adaptation_curves"):
        pytest.importorskip("matplotlib", reason="the page's figures are drawn by matplotlib (the `compare` extra)")
        assert f"({'.'}/{figure}.png)" in text and (out / f"{figure}.png").stat().st_size > 0


def test_recorded_commands_are_in_the_run_log_without_the_data_path(page_for):
    out, _, text = page_for(0.2)
    log = " ".join((out / "results-log.md").read_text().split())  # the commands, lines broken at 120 characters
    assert "[results-log.md](results-log.md)" in " ".join(text.split()) and "`python benchmarks/" not in text
    for page_text in (text, log):
        assert "/home/someone/private-data" not in page_text and "/srv/repo" not in page_text
    assert "`python evidence/reproduce.py --budget quick --data $HF_NEUTRENO_DATA --out benchmarks/results/x`" in log
    assert page.redact("reproduce.py --data=/d/x --workers 2") == "reproduce.py --data=$HF_NEUTRENO_DATA --workers 2"
    assert page.redact("reproduce.py --out runs/x") == "reproduce.py --out runs/x"  # already relative: as it was
    today = "python -m experiments reproduce --out /srv/repo/experiments/evidence/results/y"
    assert page.redact(today) == "python -m experiments reproduce --out experiments/evidence/results/y"


def test_the_claims_data_is_consistent():
    """Every claim id is unique, every opening-table cell names a claim, every measure has a format."""
    ids = [claim["id"] for claim in claims_data.CLAIMS]
    assert len(ids) == len(set(ids))
    for method in reproduce_methods.METHODS.values():
        for field in (*reproduce_methods.TASKS, "cosine", "hfc"):
            assert method.get(field) in (None, "n/a", *ids), (method["name"], field)
    for claim in claims_data.CLAIMS:
        assert claim["measure"].format and claim["sign"] in (-1, 0, 1)


def test_commands_of_one_machine_are_named_as_spans():
    assert page._spans([1, 2, 3, 5, 7, 8]) == "1-3, 5, 7-8" and page._spans([4]) == "4"


def test_a_machine_line_gives_workers_only_when_its_commands_agree():
    def session(workers, **machine):
        return {
            "command": COMMAND,
            "started": "2026-01-01 00:00:00",
            "load_average_start": [0.1],
            "machine": {**MACHINE, "workers": workers, **machine},
        }

    gpu = {"gpu": "NVIDIA H200", "python": "3.12"}
    text = page.header({"budget": BUDGET, "sessions": [session(1), session(2), session(5, **gpu)]}, [])
    assert "- **Machine (commands 1-2)**: CPU, 2 cores; worker processes and torch threads as each command" in text
    assert "- **Machine (command 3)**: NVIDIA H200; 5 worker process(es) × 1 torch thread(s); python 3.12" in text


def test_the_load_line_reads_the_shared_cpu_machine_only():
    """A GPU machine's share of the units ran alone on its own cores: the load line gives the CPU units' load on the
    CPU machine's cores, whichever session came last."""

    def unit(name, load, device):
        record = {"unit": Unit("lm", "softmax", name, 0).to_json(), "budget": BUDGET, "seconds": 1.0}
        return UnitResult.from_json(record | {"load_average": load, "device": device})

    def session(cores, **gpu):
        return {"command": COMMAND, "started": "2026", "machine": {**MACHINE, "cpu_cores": cores, **gpu}}

    units = [unit("a", [1.5, 2.0], "CPU: AMD EPYC"), unit("b", [9.0, 9.5], "NVIDIA H100 80GB HBM3")]
    run = {"sessions": [session(2), session(16, gpu="NVIDIA H100 80GB HBM3")]}
    (line,) = [x for x in page.totals(run, units, BUDGET) if "load average" in x]
    assert "1.5-2.0 on 2 cores" in line


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "folder, docs",
    [
        ("experiments/evidence/results/reproduce-cpu-long", "docs/results.md"),
        ("experiments/evidence/results/reproduce", None),
    ],
)
def test_the_committed_pages_are_rendered_from_the_committed_unit_json(folder, docs, tmp_path):
    """Every committed unit's JSON parses into a typed unit named as its file, and `--render` on a copy of the run
    gives the committed pages, run logs and experiment JSON byte for byte (the docs page from docs/ beside it)."""
    out = tmp_path / folder
    shutil.copytree(ROOT / folder, out, ignore=shutil.ignore_patterns("models", "*.png"))
    units = load_units(out)
    assert units and all(f"{u.unit.name}.json" in {p.name for p in (out / "units").iterdir()} for u in units)
    assert len(units) == len(list((out / "units").glob("*.json")))
    assert all(field in u.record for u in units for field in u.unit.plan.records)  # what each plan measures
    reproduce.main(["--render", "--out", str(out)] + (["--docs", str(tmp_path / docs)] if docs else []))
    written = [p.name for p in out.glob("*.json") if p.name not in ("run.json", "wikitext2_unigram.json")]
    for name in ("results.md", "results-log.md", *written):
        assert (out / name).read_text() == (ROOT / folder / name).read_text(), name
    if docs:
        log = Path(docs).with_name(Path(docs).stem + "-log.md")
        for page_path in (Path(docs), log):
            assert (tmp_path / page_path).read_text() == (ROOT / page_path).read_text(), page_path
