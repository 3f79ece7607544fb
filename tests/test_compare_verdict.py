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
    """Every learned α at 0 (the forward's clamp) in every layer and seed: the trained model computes as the model as
    loaded, which the verdict says beside the paired reading; one layer above 0 is a remedy that stayed on."""
    off = [[0.0, 0.0]] * 3
    reading = verdict(
        results(
            {"softmax": [0.80, 0.82, 0.81], "value-residual-learnable": [0.8004, 0.8203, 0.8101]},
            coefficients={"value-residual-learnable": off},
        )
    )
    entry = reading["variants"]["value-residual-learnable"]
    assert entry["switched_off"] and entry["conclusion"] == "within the spread" and reading["best"] is None
    assert "switched itself off" in reading["text"] and "ended at 0 in every layer and seed" in reading["text"]
    assert "trained with the remedy on" not in reading["text"]  # it started at 0
    on = verdict(
        results(
            {"softmax": [0.80, 0.82, 0.81], "neutreno-learnable": [0.85, 0.87, 0.86]},
            coefficients={"neutreno-learnable": [[0.0, 0.2]] * 3},
        )
    )
    assert on["variants"]["neutreno-learnable"]["coefficients"]["at_off"] == 1
    assert on["best"] == "neutreno-learnable" and "λ first layer 0.000, mean 0.100, last layer 0.200" in on["text"]


def test_a_remedy_that_ended_off_after_training_with_it_on_keeps_its_paired_reading():
    """A learnable λ that started at 0.6 and ended at 0 everywhere trained the weights with the remedy on: a clear
    paired gain is still read (and can be best), with the note that the trained model computes as the plain one."""
    data = results(
        {"softmax": [0.80, 0.82, 0.81], "neutreno-learnable": [0.85, 0.87, 0.865]},
        coefficients={"neutreno-learnable": [[0.0, 0.0]] * 3},
    )
    data["variants"]["neutreno-learnable"]["value_path"]["coefficient"] = 0.6
    reading = verdict(data)
    entry = reading["variants"]["neutreno-learnable"]
    assert entry["switched_off"] and entry["conclusion"] == "better" and reading["best"] == "neutreno-learnable"
    assert "learned from 0.6, ended at 0" in reading["text"] and "trained with the remedy on" in reading["text"]
    assert "No variant is better" not in reading["text"]


def test_every_seed_a_tie_is_no_win_however_narrow_the_interval():
    """One test item of 2,000 on each of three seeds: every seed a tie, the paired differences identical, so the
    t-interval is [+0.0005, +0.0005]. It excludes 0 but not the tie band: no win, no best."""
    softmax, variant = [0.6370, 0.6390, 0.6355], [0.6375, 0.6395, 0.6360]
    reading = verdict(results({"softmax": softmax, "neutreno": variant}))
    assert reading["variants"]["neutreno"]["conclusion"] == "within the spread" and reading["best"] is None
    assert "No variant is better than softmax" in reading["text"]
    close = verdict(
        results({"softmax": softmax, "neutreno": [a + d for a, d in zip(softmax, (0.0010, 0.0012, 0.0009))]})
    )
    assert close["best"] is None  # three ties with a small spread: its interval [0.0007, 0.0014] is inside the band
    # two items of 500 on each seed, beyond the band on every seed: a win, and the best
    clear = verdict(results({"softmax": [0.80, 0.82, 0.81], "neutreno": [0.804, 0.824, 0.814]}))
    assert clear["best"] == "neutreno"
    # perplexity: the band is 0.2 % of the baseline's value; lower is better
    ppl = {"softmax": [100.0, 110.0, 105.0]}
    assert verdict(results({**ppl, "neutreno": [99.9, 109.9, 104.9]}, metric="perplexity"))["best"] is None
    assert verdict(results({**ppl, "neutreno": [99.0, 109.0, 104.0]}, metric="perplexity"))["best"] == "neutreno"


def test_a_difference_of_exactly_the_tolerance_is_a_win_whatever_the_rounding():
    """One item of 500 is 0.002, the tolerance, which wins (`w/t/l`: better by at least 0.002); 141/500 − 140/500
    rounds to 0.0019999999999999463 in floating point."""
    for count in range(100, 499):
        difference = (count + 1) / 500 - count / 500
        assert not is_tie(difference, "accuracy", count / 500), (count, difference)


def test_the_interval_uses_students_t_quantile_at_every_seed_count():
    """Against scipy's quantiles (a test dependency, not the package's): the interval of n seeds is
    mean ± t(0.975, n − 1) · std / √n, to 3 decimals of t at every n up to 60."""
    import math
    import statistics

    from scipy import stats

    for n in range(2, 61):
        differences = [0.01 * ((i * 7) % 5 - 2) + 0.003 for i in range(n)]
        reading = paired_reading(
            {str(i): d for i, d in enumerate(differences)}, {str(i): 0.0 for i in range(n)}, "accuracy"
        )
        half = stats.t.ppf(0.975, n - 1) * statistics.stdev(differences) / math.sqrt(n)
        mean = statistics.fmean(differences)
        assert reading["interval"] == pytest.approx([mean - half, mean + half], rel=0, abs=half * 5e-4), n


def test_best_is_the_variant_with_the_best_paired_difference():
    """Ranked by the paired mean over the seeds it shares with the baseline, not by its own mean: a variant missing a
    seed (an interrupted run) has its own mean over other seeds. Here value-residual has seeds 1 and 2 only, where
    the baseline scores higher, so its own mean (0.875) is above neutreno's (0.83) though it gains less (+0.025
    against +0.03 on every seed)."""
    data = results({"softmax": [0.70, 0.80, 0.90], "neutreno": [0.73, 0.83, 0.93], "value-residual": [0.0, 0.0]})
    per_seed = {"1": 0.8248, "2": 0.9252}
    data["variants"]["value-residual"]["accuracy"] = {"per_seed": per_seed, "mean": 0.875}
    reading = verdict(data)
    assert reading["variants"]["value-residual"]["conclusion"] == "better"
    assert reading["best"] == "neutreno"


def test_diverged_seeds_are_named_and_left_out_of_the_reading():
    """A run recorded as diverged (score None) drops out of its variant's pairing, and the verdict names it; a
    baseline diverged in every seed says to lower the learning rate."""
    data = results({"softmax": [0.80, 0.82, 0.81], "neutreno": [0.85, 0.87, 0.86]})
    entry = data["variants"]["neutreno"]
    entry["per_seed"][1]["diverged"] = True
    entry["accuracy"]["per_seed"] = {"0": 0.85, "2": 0.86}
    reading = verdict(data)
    assert reading["variants"]["neutreno"]["paired"]["accuracy"]["n"] == 2
    assert "neutreno diverged on seed 1" in reading["text"]
    dead = results({"softmax": [0.1, 0.1, 0.1], "neutreno": [0.85, 0.87, 0.86]})
    for run in dead["variants"]["softmax"]["per_seed"]:
        run["diverged"] = True
    dead["variants"]["softmax"]["accuracy"] = {"per_seed": {}, "mean": None}
    reading = verdict(dead)
    assert reading["best"] is None and reading["text"].startswith("The baseline diverged in every seed")
    assert "--learning-rate" in reading["text"]


@pytest.mark.parametrize(
    "case, expected",
    [
        (dict(scores=[0.26, 0.27, 0.25], classes=4), "near chance (0.250 for 4 classes)"),
        (dict(scores=[0.71, 0.70, 0.72], classes=2, majority=0.7), "most common class scores (0.700)"),
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
