"""Analyses of any Hugging Face transformers model: over-smoothing per layer, and the spectral dominance of layers.

    from hf_neutreno.diagnostics import measure_oversmoothing, spectral_dominance
    report = measure_oversmoothing(model, dataloader)              # DEFAULT_METRICS, every layer
    report.per_layer("cosine_similarity")                          # [embeddings, block 1, ..., block L]
    report.plot("oversmoothing.png", others=[baseline_report])     # NeuTRENO Fig. 1
    print(spectral_dominance(vit, pixel_values))                   # Dovonon et al., poster Table 1

`OversmoothingCallback` logs the same values at every `Trainer` evaluation; `hf-neutreno diagnose` runs it from the
command line. `hf_neutreno.diagnostics.metrics` defines every metric exactly. Plain code: never copied with a
checkpoint.
"""

from ..names import ATTENTION_METRICS, DEFAULT_METRICS, HIDDEN_STATE_METRICS, METRICS
from .callback import OversmoothingCallback
from .oversmoothing import measure_oversmoothing
from .probe import attention_maps
from .report import OversmoothingReport, plot_attention_maps
from .spectral import SpectralDominance, head_factors, spectral_dominance

__all__ = [
    "ATTENTION_METRICS",
    "DEFAULT_METRICS",
    "HIDDEN_STATE_METRICS",
    "METRICS",
    "OversmoothingCallback",
    "OversmoothingReport",
    "SpectralDominance",
    "attention_maps",
    "head_factors",
    "measure_oversmoothing",
    "plot_attention_maps",
    "spectral_dominance",
]
