"""The verdict rules of `hf-neutreno compare` (`hf_neutreno.engine.compare.verdict`), on results written by hand: ties,
a remedy that switched itself off, no best within the seeds' spread, and a baseline that did not learn."""

import pytest

from hf_neutreno.engine.compare.report import format_table
from hf_neutreno.engine.compare.verdict import is_tie, paired_reading, verdict


def results(scores: dict, metric: str = "accuracy", coefficients: dict | None = None, loss=(2.0, 1.0), **data):
    """A results.json of variant -> per-seed scores (seeds 0, 1, 2), with learnable coefficients per variant and
    seed where given."""
    variants = {}
    for name, values in scores.items():
        per_seed = [
            {
                "seed": seed,
                "learned_coefficients": (coefficients or {}).get(name, [None] * 3)[seed],
                "learning_curve": [{"step": 1, "loss": loss[0]}, {"step": 10, "loss": loss[1]}],
            }
            for seed in range(len(values))
        ]
        variants[name] = {
            "description": name,
            "value_path": {"method": "value_residual" if "residual" in name else "neutreno", "coefficient": 0.0},
            metric: {"per_seed": {str(s): v for s, v in enumerate(values)}, "mean": sum(values) / len(values)},
            "last_layer_cosine": {"per_seed": {str(s): 0.5 for s in range(len(values))}},
            "per_seed": per_seed,
        }
    return {"metric": metric, "variants": variants, "data": data, "baseline": "softmax"}


def test_a_difference_within_the_tolerance_is_a_tie_not_a_win():
    assert is_tie(0.001, "accuracy", 0.8) and not is_tie(0.003, "accuracy", 0.8)
    assert is_tie(1.0, "perplexity", 1000.0) and not is_tie(3.0, "perplexity", 1000.0)  # relative: 0.2 %
    reading = paired_reading({"0": 0.8010, "1": 0.8100, "2": 0.7900}, {"0": 0.8, "1": 0.8, "2": 0.8}, "accuracy")
    assert (reading["wins"], reading["ties"], reading["losses"]) == (1, 1, 1)


def test_best_is_named_only_where_the_paired_interval_excludes_zero():
    clear = verdict(results({"softmax": [0.80, 0.82, 0.81], "neutreno": [0.85, 0.87, 0.86]}))
    assert clear["best"] == "neutreno" and "Best accuracy: neutreno" in clear["text"]
    assert clear["variants"]["neutreno"]["conclusion"] == "better"
    noisy = verdict(results({"softmax": [0.80, 0.82, 0.81], "neutreno": [0.86, 0.79, 0.83]}))
    assert noisy["best"] is None and noisy["variants"]["neutreno"]["conclusion"] == "within the spread"
    assert "No variant is better than softmax beyond the seeds' spread" in noisy["text"]
    worse = verdict(results({"softmax": [0.80, 0.82, 0.81], "neutreno": [0.75, 0.78, 0.76]}))
    assert worse["best"] is None and "neutreno (neutreno) hurt" in worse["text"]
    one_seed = verdict(results({"softmax": [0.80], "neutreno": [0.90]}))
    assert one_seed["best"] is None  # one seed has no spread to exceed


def test_a_remedy_whose_coefficients_all_ended_at_zero_switched_itself_off():
    """Every learned α at 0 (the forward's clamp) in every layer and seed: the model as loaded, even where its
    accuracy differs by rounding; one layer above 0 is a remedy that stayed on."""
    off = [[0.0, 0.0]] * 3
    reading = verdict(
        results(
            {"softmax": [0.80, 0.82, 0.81], "value-residual-learnable": [0.8004, 0.8203, 0.8101]},
            coefficients={"value-residual-learnable": off},
        )
    )
    entry = reading["variants"]["value-residual-learnable"]
    assert entry["conclusion"] == "switched itself off" and reading["best"] is None
    assert "switched itself off" in reading["text"] and "α ended at 0 in every layer and seed" in reading["text"]
    on = verdict(
        results(
            {"softmax": [0.80, 0.82, 0.81], "neutreno-learnable": [0.85, 0.87, 0.86]},
            coefficients={"neutreno-learnable": [[0.0, 0.2]] * 3},
        )
    )
    assert on["variants"]["neutreno-learnable"]["coefficients"]["at_off"] == 1
    assert on["best"] == "neutreno-learnable" and "λ first layer 0.000, mean 0.100, last layer 0.200" in on["text"]


@pytest.mark.parametrize(
    "case, expected",
    [
        (dict(scores=[0.26, 0.27, 0.25], classes=4), "near chance (0.250 for 4 classes)"),
        (dict(scores=[1150.0, 1149.0, 1151.0], metric="perplexity", vocabulary=2000), "near its vocabulary size"),
        (dict(scores=[0.9, 0.91, 0.92], loss=(2.0, 1.98)), "fell by under 5 %"),
    ],
)
def test_a_baseline_that_did_not_learn_is_said_with_the_flags_that_change_it(case, expected):
    scores, metric = case.pop("scores"), case.pop("metric", "accuracy")
    loss = case.pop("loss", (2.0, 1.0))
    reading = verdict(results({"softmax": scores, "neutreno": scores}, metric=metric, loss=loss, **case))
    assert expected in reading["baseline_problem"]
    assert reading["text"].startswith("The baseline barely learned") and "--from-scratch" in reading["text"]
    healthy = verdict(results({"softmax": [0.9, 0.91, 0.92], "neutreno": [0.9, 0.91, 0.92]}, classes=4))
    assert healthy["baseline_problem"] is None


def test_the_table_prints_the_learned_coefficients_and_the_verdict():
    data = results(
        {"softmax": [0.80, 0.82, 0.81], "neutreno-learnable": [0.85, 0.87, 0.86]},
        coefficients={"neutreno-learnable": [[0.0, 0.2]] * 3},
    )
    for name, entry in data["variants"].items():
        entry.update(last_layer_cosine={"mean": 0.5, "std": 0.0, "per_seed": {"0": 0.5, "1": 0.5, "2": 0.5}})
        entry["accuracy"].update(std=0.01)
        entry["train_seconds"] = 1.0
        if name != "softmax":
            entry["difference_from_baseline"] = {
                key: paired_reading(entry[key]["per_seed"], data["variants"]["softmax"][key]["per_seed"], key)
                for key in ("accuracy", "last_layer_cosine")
            }
    data.update(seeds=[0, 1, 2], decoder_layers=[], probe_samples=8, task="image-classification", eval_split="test")
    data["data"] = {"eval_images": 30}
    data["verdict"] = verdict(data)
    table = " ".join(format_table(data).split())
    assert "(3/0/0)" in table and "(0/3/0)" in table  # the accuracy wins; the cosine: equal in every seed
    assert "neutreno-learnable: learned λ first layer 0.000, mean 0.100, last layer 0.200 (1 of 2 layers at 0)" in table
    assert (
        "Verdict: On this model and data, neutreno-learnable" in table and "Best accuracy: neutreno-learnable" in table
    )
