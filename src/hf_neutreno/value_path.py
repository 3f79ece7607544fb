"""The value path's public names: `apply_value_path` (NeuTRENO, the value residual and twicing on any transformers
model) and what goes with it.

They are defined in `hf_neutreno/models/value_path.py`, beside the model files, because that file travels with every
adapted checkpoint (and its siblings with it: NeuTRENO's term and the default coefficients, each written once).
"""

from .models.value_path import (
    DEFAULT_COEFFICIENTS,
    MARKER,
    METHODS,
    OLD_MARKER,
    PEFT_MODULES,
    apply_value_path,
    check_settings,
    coefficient_parameters,
    is_value_path_model,
    learned_coefficients,
    remove_value_path,
    value_path_class,
    value_path_parameters,
)

__all__ = [
    "DEFAULT_COEFFICIENTS",
    "MARKER",
    "METHODS",
    "OLD_MARKER",
    "PEFT_MODULES",
    "apply_value_path",
    "check_settings",
    "coefficient_parameters",
    "is_value_path_model",
    "learned_coefficients",
    "remove_value_path",
    "value_path_class",
    "value_path_parameters",
]
