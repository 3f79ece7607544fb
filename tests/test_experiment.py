"""The paired-experiment core (`hf_neutreno.engine.experiment`), against plain computations: which weights a variant
starts from, the fingerprint that pairs them, and the statistics over seeds (numpy, by hand)."""

import math

import numpy as np
import pytest
import torch

from hf_neutreno.engine.experiment import (
    Run,
    copy_shared_weights,
    paired,
    paired_model,
    run_paired,
    summary,
    weights_fingerprint,
)
from hf_neutreno.engine.model_factories import image_classifier

SHAPE = dict(
    num_hidden_layers=2, hidden_size=16, num_attention_heads=2, intermediate_size=32, image_size=8, patch_size=4
)
LABELS = ["a", "b", "c"]


def build(variant: str) -> torch.nn.Module:
    return image_classifier(variant, "vit-micro", LABELS, **SHAPE)


def state(model) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


def test_a_variant_starts_from_its_seeds_reference_whatever_was_built_before():
    torch.manual_seed(5)
    reference = state(build("softmax"))  # what the seed draws for the softmax ViT, built by hand
    for before in ([], ["neutreno"], ["vit-plus", "neutreno"]):  # other variants first, or none: the same weights
        for variant in before:
            paired_model(build, variant, 99, reference="softmax")
        neutreno = state(paired_model(build, "neutreno", 5, reference="softmax"))
        vit_minus = state(paired_model(build, "vit-minus", 5, reference="softmax"))
        assert neutreno.keys() == reference.keys()
        assert all(torch.equal(neutreno[k], reference[k]) for k in reference)  # λ is no parameter: every weight
        shared = reference.keys() & vit_minus.keys()
        assert all(torch.equal(vit_minus[k], reference[k]) for k in shared)
        assert {k.rsplit(".", 2)[-2] for k in reference.keys() - shared} == {"v_proj", "o_proj"}
    again = state(paired_model(build, "vit-minus", 5, reference="softmax"))
    assert all(torch.equal(again[k], vit_minus[k]) for k in vit_minus)  # its own parameters are the seed's too
    other = state(paired_model(build, "neutreno", 6, reference="softmax"))
    assert not all(torch.equal(other[k], reference[k]) for k in reference)


def test_run_paired_trains_the_unfinished_runs_from_their_seeds_reference():
    """Each run not `finished` is trained once, in order, from the weights its seed draws for the reference (built
    here by hand), with the fingerprint of those weights; `build` None hands the run to `train` to build itself."""
    seen = []

    def train(run, model, fingerprint):
        seen.append((run, None if model is None else state(model), fingerprint))

    runs = [Run("softmax", 3), Run("neutreno", 3), Run("neutreno", 4, (("fraction", 0.5),))]
    trained = run_paired(runs, build, train, finished=lambda run: run.seed == 4)
    assert trained == runs[:2] and [run for run, _, _ in seen] == runs[:2]
    torch.manual_seed(3)
    reference = build("softmax")
    for _, weights, fingerprint in seen:
        assert all(torch.equal(weights[k], tensor) for k, tensor in reference.state_dict().items())
        assert fingerprint == weights_fingerprint(reference)
    assert runs[2].get("fraction") == 0.5
    seen.clear()
    assert run_paired(runs[2:], None, train) == runs[2:] and seen == [(runs[2], None, None)]


def test_copy_shared_weights_copies_names_and_shapes_that_coincide_only():
    source, target = torch.nn.Linear(3, 4), torch.nn.Linear(3, 2)
    target.bias = torch.nn.Parameter(torch.zeros(2))
    own = state(target)
    copy_shared_weights(target, source)  # `weight` and `bias` differ in shape: nothing is copied
    assert all(torch.equal(own[k], target.state_dict()[k]) for k in own)
    copy_shared_weights(target, {"weight": torch.ones(2, 3), "extra": torch.ones(1)})
    assert torch.equal(target.weight, torch.ones(2, 3)) and torch.equal(target.bias, torch.zeros(2))


def test_the_fingerprint_pairs_equal_weights_only():
    torch.manual_seed(0)
    model = build("softmax")
    fingerprint = weights_fingerprint(model)
    assert weights_fingerprint(paired_model(build, "neutreno", 0, reference="softmax")) == fingerprint
    with torch.no_grad():
        next(model.parameters())[0].view(-1)[0] += 1e-6
    assert weights_fingerprint(model) != fingerprint


def test_summary_and_paired_differences_by_numpy():
    variant, baseline = {0: 0.61, 1: 0.55, 2: 0.90, 3: 0.4}, {0: 0.50, 1: 0.70, 2: 0.80}
    stats = summary(variant)
    values = np.array(list(variant.values()))
    assert stats["mean"] == pytest.approx(values.mean()) and stats["std"] == pytest.approx(values.std(ddof=1))
    assert stats["n"] == 4 and stats["per_seed"] == {"0": 0.61, "1": 0.55, "2": 0.90, "3": 0.4}
    difference = np.array([0.11, -0.15, 0.10])  # seed 3 has no baseline: unpaired
    delta = paired(variant, baseline)
    assert delta["n"] == 3 and delta["wins"] == 2 and delta["higher_is_better"]
    assert delta["mean"] == pytest.approx(difference.mean()) and delta["std"] == pytest.approx(difference.std(ddof=1))
    assert paired(variant, baseline, higher_is_better=False)["wins"] == 1
    assert math.isnan(summary({0: 1.0})["std"])  # one seed: no spread
