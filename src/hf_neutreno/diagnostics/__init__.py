"""Over-smoothing diagnostics for any Hugging Face transformers model.

    from hf_neutreno.diagnostics import measure_oversmoothing
    report = measure_oversmoothing(model, dataloader)              # every metric, every layer
    report.per_layer("cosine_similarity")                          # [embeddings, block 1, ..., block L]
    report.plot("oversmoothing.png", others=[baseline_report])     # NeuTRENO Fig. 1

`OversmoothingCallback` logs the same values at every `Trainer` evaluation; `hf-neutreno diagnose` runs it from the
command line. `hf_neutreno.diagnostics.metrics` defines every metric exactly.
"""

from .callback import OversmoothingCallback
from .metrics import ATTENTION_METRICS, HIDDEN_STATE_METRICS, METRICS
from .oversmoothing import measure_oversmoothing
from .probe import attention_maps
from .report import OversmoothingReport, plot_attention_maps

__all__ = [
    "ATTENTION_METRICS",
    "HIDDEN_STATE_METRICS",
    "METRICS",
    "OversmoothingCallback",
    "OversmoothingReport",
    "attention_maps",
    "measure_oversmoothing",
    "plot_attention_maps",
]
