"""experiments/evidence/reproduce.py end to end at a microscopic budget, and its statistics against hand computation."""

import json
import math
import re
from pathlib import Path

import pytest

from experiments.evidence import reproduce, reproduce_cifar, reproduce_segment, reproduce_training
from experiments.evidence import reproduce_figures as figures
from experiments.evidence import reproduce_page as page
from experiments.evidence import reproduce_plans as plans
from experiments.evidence import reproduce_report as report
from experiments.evidence import reproduce_tables as tables
from hf_neutreno.engine import experiment
from results_sections import RESULTS_SECTIONS

# Two seeds (a std needs two), 2-layer models (so NeuTRENO's term acts), a few images and tokens, two steps each.
MICRO = (
    "--quick --seeds 0 1 --vit-layers 2 --lm-layers 2 --train-samples 16 --batch-size 8 --test-samples 12 "
    "--corruption-samples 4 --oversmoothing-samples 6 --spectral-samples 3 --lm-steps 2 --lm-batch-size 1 "
    "--lm-warmup-steps 0 --sliding-tokens 259 --block-tokens 520"
).split()
EXPERIMENTS = ("cifar10_accuracy", "oversmoothing", "spectral", "data_efficiency", "corruptions", "wikitext2")


def test_mean_and_sample_std_by_hand():
    assert experiment.mean_std([1, 2, 3]) == (2.0, 1.0)  # std with n − 1: sqrt((1 + 0 + 1) / 2)
    mean, std = experiment.mean_std([0.5])
    assert mean == 0.5 and math.isnan(std)
    summary = experiment.summary({0: 0.2, 1: 0.4, 2: 0.9})
    assert summary["mean"] == pytest.approx(0.5) and summary["std"] == pytest.approx(math.sqrt(0.13))
    assert summary["per_seed"] == {"0": 0.2, "1": 0.4, "2": 0.9} and summary["n"] == 3


def test_paired_differences_by_hand():
    variant, baseline = {0: 0.6, 1: 0.5, 2: 0.9}, {0: 0.5, 1: 0.7, 2: 0.8}
    delta = experiment.paired(variant, baseline)  # differences 0.1, -0.2, 0.1
    assert delta["mean"] == pytest.approx(0.0, abs=1e-12)
    assert delta["std"] == pytest.approx(math.sqrt((0.01 + 0.04 + 0.01) / 2))
    assert delta["wins"] == 2
    assert experiment.paired(variant, baseline, higher_is_better=False)["wins"] == 1  # perplexity: lower wins
    assert experiment.paired({0: 1.0, 5: 2.0}, {0: 0.5})["n"] == 1  # only seeds both have are paired


def test_accuracy_table_aligns_seeds_when_variants_have_different_numbers():
    """Mid-run a variant can have more finished seeds than another: each per-seed slot must be the seed it names."""
    data = {
        "names": {"vit": "ViT", "neutreno": "NeuTRENO"},
        "paired": {},
        "summary": {
            "vit": {"accuracy": experiment.summary({0: 0.6215, 1: 0.621})},
            "neutreno": {"accuracy": experiment.summary({0: 0.6124, 1: 0.6036, 2: 0.6041})},
        },
    }
    table = tables.comparison(data).splitlines()
    assert "per seed: 0 / 1 / 2" in table[0]
    assert "(62.15 / 62.10 / —) |" in table[2] and "(61.24 / 60.36 / 60.41) |" in table[3]


def test_oversmoothing_figure_names_each_variants_own_seed_count(monkeypatch, tmp_path):
    """ViT and NeuTRENO have 5 seeds, ViT⁻ and ViT⁺ 3: the figure must not label every curve with ViT's count."""
    captured = {}

    def plot(self, path, others=(), labels=None, title=None):
        captured.update(labels=labels, title=title)

    monkeypatch.setattr(figures.OversmoothingReport, "plot", plot)
    record = {
        "oversmoothing": {
            "values": {m: [0.5, 0.4] for m in figures.METRICS},
            "num_samples": 4,
            "layers": {m: [0, 1] for m in figures.METRICS},
        }
    }
    seeds = {"vit": 5, "neutreno": 5, "vit-": 3, "vit+": 3}
    units = {variant: {s: {"trained": record} for s in range(n)} for variant, n in seeds.items()}
    names = dict(zip(seeds, seeds))
    assert figures.plot_oversmoothing(units, names, tmp_path / "figure.png", "trained") == "figure.png"
    counts = [int(re.search(r"\(mean of (\d+)\)$", label).group(1)) for label in captured["labels"]]
    assert counts == [5, 5, 3, 3]
    assert not re.search(r"\d+ seeds", captured["title"])  # no single count for all curves in the title


@pytest.fixture(scope="module")
def micro_run(tmp_path_factory, data_dir):
    out = tmp_path_factory.mktemp("reproduce")
    docs = out / "docs" / "results.md"
    reproduce.main(MICRO + ["--data", str(data_dir), "--out", str(out), "--docs", str(docs)])
    return out, docs


@pytest.mark.slow
def test_every_experiment_writes_its_json_and_figures(micro_run):
    out, _ = micro_run
    units = sorted(p.stem for p in (out / "units").glob("*.json"))
    # 4 variants at 100 %, ViT and ViT⁻ at 50 % and 10 %, 2 LM variants; each for both seeds.
    assert len(units) == 2 * (4 + 2 * 2 + 2)
    for name in EXPERIMENTS + ("wikitext2_unigram",):
        assert (out / f"{name}.json").is_file(), name
    for figure in ("oversmoothing_init", "oversmoothing_trained", "cifar10_curves", "wikitext2_curves"):
        assert (out / f"{figure}.png").stat().st_size > 0, figure
    run = json.loads((out / "run.json").read_text())
    assert run["budget"]["seeds"] == [0, 1] and run["sessions"][0]["units_run"] == len(units)


@pytest.mark.slow
def test_tables_hold_the_unit_values_and_their_statistics(micro_run):
    out, _ = micro_run
    unit = lambda name: json.loads((out / "units" / f"{name}.json").read_text())  # noqa: E731
    accuracy = json.loads((out / "cifar10_accuracy.json").read_text())
    per_seed = [unit(f"cifar-neutreno-100pct-seed{s}")["accuracy"] for s in (0, 1)]
    neutreno = accuracy["summary"]["neutreno"]["accuracy"]
    assert list(neutreno["per_seed"].values()) == per_seed
    by_hand = (sum(per_seed) / 2, abs(per_seed[0] - per_seed[1]) / 2**0.5)  # the sample std of two values
    assert (neutreno["mean"], neutreno["std"]) == pytest.approx(by_hand)
    baseline = [unit(f"cifar-vit-100pct-seed{s}")["accuracy"] for s in (0, 1)]
    assert list(accuracy["paired"]["neutreno vs vit"]["accuracy"]["per_seed"].values()) == pytest.approx(
        [n - b for n, b in zip(per_seed, baseline)]
    )

    lm = json.loads((out / "wikitext2.json").read_text())
    ppl = [unit(f"lm-neutreno-seed{s}")["test"]["sliding"]["perplexity"] for s in (0, 1)]
    assert lm["summary"]["neutreno"]["ppl:test:sliding"]["mean"] == pytest.approx(sum(ppl) / 2)
    # The sliding window over 259 tokens: the first window scores its 256 positions, then 2 windows score 1 each.
    assert lm["scored_tokens"]["validation"] == {"sliding": 258, "blocks": 519}


@pytest.mark.slow
def test_variants_share_the_seeds_initialisation(micro_run):
    out, _ = micro_run
    smoothing = json.loads((out / "oversmoothing.json").read_text())["summary"]
    embeddings = {v: by["cosine:init:0"]["per_seed"]["0"] for v, by in smoothing.items()}  # layer 0: the embeddings
    assert len(set(embeddings.values())) == 1, embeddings
    assert (
        smoothing["neutreno"]["cosine:init:2"]["per_seed"]["0"] != smoothing["vit"]["cosine:init:2"]["per_seed"]["0"]
    )  # the term acts


@pytest.mark.slow
def test_eigen_spectra_fix_the_dominating_eigenvalue(micro_run):
    """ViT⁺ (Λ > 0) always pairs with A's eigenvalue 1; ViT⁻ (Λ < 0) never does (Dovonon et al.)."""
    out, _ = micro_run
    spectral = json.loads((out / "spectral.json").read_text())["summary"]
    for stage in ("init", "trained"):
        assert spectral["vit+"][f"spectral:{stage}:smoothing"]["mean"] == 1.0
        assert spectral["vit-"][f"spectral:{stage}:smoothing"]["mean"] == 0.0


@pytest.mark.slow
def test_markdown_has_every_table_and_resolvable_figures(micro_run):
    out, docs = micro_run
    text = docs.read_text()
    log = " ".join((docs.parent / "results-log.md").read_text().split())  # its commands, lines broken at 120
    for heading in RESULTS_SECTIONS:
        assert heading in text, heading
    assert "torch 2." in " ".join(text.split()) and "python -m experiments reproduce --quick" in log
    figures = re.findall(r"!\[[^]]*\]\(([^)]+)\)", text)
    assert {Path(path).name for path in figures} >= {"cifar10_curves.png", "wikitext2_curves.png"}  # the curves
    for path in figures:
        assert (docs.parent / path).is_file(), path
    assert (out / "results.md").is_file()


@pytest.mark.slow
def test_a_second_run_reuses_the_cached_units(micro_run, data_dir, capsys):
    out, docs = micro_run
    before = {p: p.stat().st_mtime_ns for p in (out / "units").glob("*.json")}
    reproduce.main(MICRO + ["--data", str(data_dir), "--out", str(out)])
    assert "0 units to run" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in (out / "units").glob("*.json")} == before


@pytest.mark.slow
def test_hand_written_notes_are_kept_with_the_run(micro_run):
    out, _ = micro_run
    (out / "notes.md").write_text("Nothing here is evidence.")
    text = page.render(out, report.aggregate(out))
    assert "## Reading these numbers\n\nNothing here is evidence." in text


class _CutOff(Exception):
    pass


@pytest.mark.slow
@pytest.mark.parametrize(
    "unit",
    [
        {"kind": "cifar", "variant": "neutreno", "fraction": 1.0, "seed": 0},
        {"kind": "cifar", "variant": "vit-", "fraction": 0.5, "seed": 0},
        {"kind": "lm", "variant": "neutreno", "seed": 0},
    ],
    ids=["cifar", "fraction", "lm"],
)
def test_a_unit_cut_off_after_a_checkpoint_resumes_to_the_uninterrupted_result(unit, data_dir, tmp_path, monkeypatch):
    # Two checkpoints per unit: two epochs of two steps, or four LM steps with a curve point every two.
    _, budget = reproduce.parse_args(MICRO + ["--epochs", "2", "--lm-steps", "4", "--lm-eval-steps", "2"])
    unit = plans.Unit.from_json(unit)
    name, data = unit.name, str(data_dir)
    reproduce.run_unit(unit, budget, tmp_path / "whole", data)
    assert not (tmp_path / "whole" / "checkpoints" / name).exists()  # removed once the unit is done

    def cut_off(self, args, state, control, **kwargs):  # the session ends right after the first checkpoint
        raise _CutOff

    with monkeypatch.context() as patch:
        patch.setattr(reproduce_training.CurvePoints, "on_save", cut_off, raising=False)
        with pytest.raises(_CutOff):
            reproduce.run_unit(unit, budget, tmp_path / "cut", data)
    checkpoints = list((tmp_path / "cut" / "checkpoints" / name).glob("checkpoint-*"))
    assert len(checkpoints) == 1 and not (tmp_path / "cut" / "units" / f"{name}.json").exists()
    state = json.loads((checkpoints[0] / "trainer_state.json").read_text())
    spent = [entry["seconds"] for entry in state["log_history"] if "seconds" in entry]  # the cut-off session's clock
    reproduce.run_unit(unit, budget, tmp_path / "cut", data)

    whole, resumed = (
        {
            k: v
            for k, v in json.loads((tmp_path / run / "units" / f"{name}.json").read_text()).items()
            if k not in ("seconds", "load_average", "train_seconds")
        }
        for run in ("whole", "cut")
    )
    # The compute a unit reports includes the sessions before it was cut off, curve or not.
    assert spent and spent[-1] > 0
    assert json.loads((tmp_path / "cut" / "units" / f"{name}.json").read_text())["seconds"] > spent[-1]
    assert len(whole.get("curve", ())) == (0 if (unit.fraction or 1.0) < 1 else 2)
    assert resumed.get("curve") == whole.get("curve")
    # The mean training loss, from the logs the checkpoint kept and the resumed session's: equal up to rounding.
    assert resumed.pop("train_loss") == pytest.approx(whole.pop("train_loss"), rel=1e-6)
    assert resumed == whole


@pytest.mark.slow
@pytest.mark.parametrize("grid", [(0.1, 0.6), (0.1, 0.2)], ids=["official-lambda-chosen", "other-lambda-chosen"])
def test_round_two_units_run_end_to_end(grid, data_dir, tmp_path, monkeypatch):
    """Round 2 at a microscopic budget: the λ sweep on the held-out split, the validated λ (only when the sweep chose
    another than 0.6); then, on one grid, the trained ViTs kept as loadable models, adaptation from them, kernel
    attention, the value paths and the Segmenters."""
    from transformers import AutoImageProcessor, AutoModelForImageClassification

    monkeypatch.setattr(plans, "LAMBDA_GRID", grid)
    monkeypatch.setattr(reproduce_cifar, "VALIDATION_IMAGES", 50)  # of 50,000: the sweep's held-out split
    # Fewer held-out scenes than the budget's Segmenters score (8), as at cpu-long (500 against 1,000): all are scored.
    monkeypatch.setattr(reproduce_segment, "SEGMENT_PILOT_IMAGES", 6)
    out = tmp_path / "round2"
    one_seed = ["--quick", "--seeds", "0", *MICRO[4:]]  # MICRO with seed 0 alone
    everything = 0.6 not in grid  # the rest of round 2 does not depend on the grid: run it once
    experiments = ["lambda", "adaptation", "kernel", "value-path", "segmentation"] if everything else ["lambda"]
    reproduce.main(one_seed + ["--data", str(data_dir), "--out", str(out), "--experiments", *experiments])
    unit = lambda name: json.loads((out / "units" / f"{name}.json").read_text())  # noqa: E731

    sweep = {lam: unit(f"sweep-neutreno-lambda{lam:g}-seed0") for lam in grid}
    assert all(u["scored_on"] == "validation" and u["neutreno_lambda"] == lam for lam, u in sweep.items())
    chosen = plans.validated_lambda(out)
    best = max(u["accuracy"] for u in sweep.values())
    assert sweep[chosen]["accuracy"] == best
    validated = sorted((out / "units").glob("cifar-neutreno-lambda*-100pct-seed*.json"))
    assert len(validated) == (0 if chosen == 0.6 else 1)
    claims = {c["id"]: c for c in json.loads((out / "claims.json").read_text())}
    assert ("cifar-neutreno-validated" in claims) == (chosen != 0.6)
    if not everything:
        return
    for variant in ("vit", "neutreno"):
        folder = out / "models" / f"cifar-{variant}-seed0"
        model = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True)
        assert model.config.neutreno_lambda == (0.6 if variant == "neutreno" else 0.0)
        assert AutoImageProcessor.from_pretrained(folder).size == {"height": 32, "width": 32}
        assert unit(f"parent-{variant}-seed0")["model_dir"] == f"models/cifar-{variant}-seed0"
    parent = unit("parent-vit-seed0")
    for variant in ("vit", "neutreno"):
        adapted = unit(f"adapt-{variant}-seed0")
        assert adapted["start_from"] == "cifar-vit-seed0" and adapted["scored_on"] == "test"
        assert adapted["neutreno_lambda"] == (chosen if variant == "neutreno" else 0.0)
    # Continued training starts exactly where the trained ViT ended: the same weights give the same cosines.
    assert unit("adapt-vit-seed0")["init"]["oversmoothing"] == parent["trained"]["oversmoothing"]
    for variant in ("vit", "neutreno"):
        kernel = unit(f"kernel-{variant}-seed0")
        assert kernel["attention_kernel"] == "linear" and 0 <= kernel["accuracy"] <= 1
    # The value paths on the first run's softmax ViT and LM: each method at its task's coefficient.
    for task, lam in (("cifar", 0.6), ("lm", 0.4)):
        for method, expected in (
            ("value-residual", ("value_residual", 0.5, False)),
            ("value-residual-learnable", ("value_residual", 0.5, True)),
            ("neutreno-learnable", ("neutreno", lam, True)),
        ):
            result = unit(f"valuepath-{task}-{method}-seed0")
            settings = result["value_path"]
            assert (settings["method"], settings["coefficient"], settings["learnable"]) == expected
            learned = result["learned_coefficients"]
            assert (learned is None) == (not expected[2])
            assert learned is None or len(learned) == len(settings["layers"])
            score = result["accuracy"] if task == "cifar" else result["validation"]["blocks"]["perplexity"]
            assert math.isfinite(score)
    # Segmenter: the pilot's optimiser on held-out training scenes, then the kept encoders and random weights.
    pilots = {recipe: unit(f"segpilot-{recipe}-seed0") for recipe in plans.SEGMENT_RECIPES}
    assert all(p["scored_on"] == "held-out training scenes" and "mean_iou_ms" not in p for p in pilots.values())
    recipe = plans.segment_recipe(out)
    assert pilots[recipe]["mean_iou"] == max(p["mean_iou"] for p in pilots.values())
    for variant in plans.SEGMENT_VARIANTS:
        result = unit(f"segment-{variant}-seed0")
        assert result["recipe"] == recipe and result["scored_on"] == "validation"
        assert all(0 <= result[key] <= 1 for key in ("mean_iou", "mean_iou_ms", "pixel_accuracy"))
        encoder = variant.removeprefix("scratch-")
        assert result["neutreno_lambda"] == (0.6 if encoder == "neutreno" else 0.0)
        assert result["start_from"] == (None if variant.startswith("scratch-") else f"cifar-{encoder}-seed0")
        assert result["trained"]["oversmoothing"]["values"]["cosine_similarity"]
    # The page shows every round-2 experiment, the λ the sweep chose, and links to the kept models.
    text = " ".join((out / "results.md").read_text().split())  # prose lines are broken at 120 characters
    for heading in (
        "## NeuTRENO's λ chosen on held-out images",
        "## The trained ViTs that adaptation",
        "## Adapting a trained ViT to NeuTRENO",
        "## Linear (kernel) attention",
    ):
        assert heading in text, heading
    assert f"**Chosen: λ = {chosen:g}" in text and "[models/cifar-vit-seed0](./models/cifar-vit-seed0)" in text
    assert {"adapt-accuracy", "kernel-accuracy"} <= set(claims)
    assert "| value residual ViT |" in text and "| value residual, learnable mix |" in text  # CIFAR and LM tables
    assert claims["valuepath-cifar-value-residual"]["planned"] == 1  # its baseline is the first run's ViT


@pytest.mark.slow
def test_only_runs_the_matching_units_and_keeps_the_whole_plan(data_dir, tmp_path):
    out = tmp_path / "share"
    reproduce.main(
        MICRO
        + ["--seeds", "0", "--experiments", "lm", "--only", "lm-neutreno-*", "--data", str(data_dir), "--out", str(out)]
    )
    assert [p.stem for p in (out / "units").glob("*.json")] == ["lm-neutreno-seed0"]
    unit = json.loads((out / "units" / "lm-neutreno-seed0.json").read_text())
    assert unit["device"].startswith("CPU: ")  # what trained it: the run's units can come from several machines
    run = json.loads((out / "run.json").read_text())
    assert run["planned"] == ["lm-softmax-seed0", "lm-neutreno-seed0"]  # the page counts the unit still to run


def test_only_without_a_matching_unit_names_the_plan(tmp_path):
    with pytest.raises(SystemExit, match=r"--only lm-\*: no planned unit matches; .*cifar-vit-100pct-seed0"):
        reproduce.main(["--quick", "--experiments", "cifar", "--only", "lm-*", "--out", str(tmp_path)])


def test_invocations_sharing_a_run_folder_each_update_their_own_record(tmp_path):
    first, second = {"command": "python a", "started": "t0"}, {"command": "python b", "started": "t1"}
    reproduce.record_session(tmp_path, first, budget_name="quick", budget={})
    reproduce.record_session(tmp_path, second, budget_name="quick", budget={})  # e.g. an --only share elsewhere
    reproduce.record_session(tmp_path, {**first, "wall_seconds": 5.0}, budget_name="quick", budget={}, update=True)
    sessions = json.loads((tmp_path / "run.json").read_text())["sessions"]
    assert [(s["command"], s.get("wall_seconds")) for s in sessions] == [("python a", 5.0), ("python b", None)]


def test_the_plan_is_every_unit_any_invocation_planned(tmp_path):
    # a later command over fewer experiments (round 2's value paths) must not shrink the page's progress count
    everything = {"command": "python a", "started": "t0", "planned": ["cifar-vit-100pct-seed0", "lm-softmax-seed0"]}
    more = {"command": "python b", "started": "t1", "planned": ["lm-softmax-seed0", "valuepath-lm-twicing-seed0"]}
    for session in (everything, more):
        reproduce.record_session(tmp_path, session, budget_name="quick", budget={})
    planned = json.loads((tmp_path / "run.json").read_text())["planned"]
    assert planned == ["cifar-vit-100pct-seed0", "lm-softmax-seed0", "valuepath-lm-twicing-seed0"]
