"""One metric path (`hf_neutreno.data.scores`): `evaluate`'s module where it loads, else the direct computation, which
agrees with evaluate's definition. The Hub is out of reach here, so evaluate's definitions come from its
documentation: `accuracy` is scikit-learn's `accuracy_score`; `mean_iou`'s documented example is in test_segmenter."""

import sys
import types

import numpy as np
import pytest
from sklearn.metrics import accuracy_score
from transformers import EvalPrediction

from hf_neutreno.data import scores as metrics


class _EvaluateAccuracy:
    """Stands in for `evaluate.load("accuracy")`: evaluate's accuracy script returns scikit-learn's accuracy_score."""

    def compute(self, predictions, references):
        return {"accuracy": float(accuracy_score(references, predictions))}


@pytest.fixture
def online(monkeypatch):
    """As with a reachable Hub: `evaluate.load` returns the module (recorded); nothing is cached between tests."""
    loaded = []
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_EVALUATE_OFFLINE", raising=False)
    monkeypatch.setitem(
        sys.modules, "evaluate", types.SimpleNamespace(load=lambda name: loaded.append(name) or _EvaluateAccuracy())
    )
    metrics._load_once.cache_clear()
    yield loaded
    metrics._load_once.cache_clear()


def test_accuracy_metrics_agree_with_evaluates_accuracy(online):
    rng = np.random.default_rng(0)
    logits, labels = rng.normal(size=(50, 7)), rng.integers(0, 7, 50)
    with_evaluate = metrics.accuracy_metrics(EvalPrediction(predictions=logits, label_ids=labels))
    assert online == ["accuracy"]
    direct = metrics.accuracy_metrics(EvalPrediction(predictions=logits, label_ids=labels))  # loaded once only
    assert online == ["accuracy"] and direct == with_evaluate
    metrics._load_once.cache_clear()
    sys.modules["evaluate"] = None  # importing it fails: the direct computation
    offline = metrics.accuracy_metrics(EvalPrediction(predictions=(logits,), label_ids=labels))
    assert offline["accuracy"] == with_evaluate["accuracy"] == accuracy_score(labels, logits.argmax(-1))
    top5 = np.argsort(-logits, axis=1)[:, :5]
    assert offline["top5_accuracy"] == np.mean([label in row for label, row in zip(labels, top5)])


def test_the_backend_decides_who_computes(monkeypatch, online):
    assert metrics.evaluate_metric("accuracy", "direct") is None and online == []
    assert isinstance(metrics.evaluate_metric("accuracy", "evaluate"), _EvaluateAccuracy)
    monkeypatch.setenv("HF_EVALUATE_OFFLINE", "1")  # switched off: auto does not even try
    assert metrics.evaluate_metric("accuracy") is None and online == ["accuracy"]
    with pytest.raises(ValueError, match=r"`backend` must be one of \['auto', 'evaluate', 'direct'\], got 'sklearn'"):
        metrics.evaluate_metric("accuracy", "sklearn")
    monkeypatch.setitem(sys.modules, "evaluate", None)
    with pytest.raises(ImportError):  # asked for by name: no fallback
        metrics.evaluate_metric("mean_iou", "evaluate")
