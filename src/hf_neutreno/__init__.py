"""hf-neutreno: NeuTRENO and eigen-parameterised transformers for the Hugging Face ecosystem.

`import hf_neutreno` registers every config and model of the package with the Auto classes and marks them for remote
code, so that `AutoModel*.from_pretrained` loads a folder of this package without `trust_remote_code`, and
`save_pretrained` and Trainer checkpoints carry their code and `auto_map`. The other public names are imported on first
use, as transformers does. `apply_value_path` puts NeuTRENO, the value residual, twicing or XSA on any transformers
model (it registers its attention function only when called). The `hf-neutreno` command skips the registering at import
(`hf_neutreno_cli.py`), so that its `--help` needs neither torch nor transformers.
"""

import importlib
import sys
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# submodule -> the public names it defines, imported on first access (PEP 562); the TYPE_CHECKING block below
# imports them for IDEs and type checkers.
_SUBMODULES = {
    "models.configuration_eigen_vit": ("EigenViTConfig",),
    "models.configuration_neutreno_gpt": ("NeuTRENOGPTConfig",),
    "models.configuration_neutreno_vit": ("NeuTRENOViTConfig",),
    "models.modeling_eigen_vit": (
        "EigenViTAttention",
        "EigenViTForImageClassification",
        "EigenViTModel",
        "EigenViTPreTrainedModel",
    ),
    "models.modeling_neutreno_gpt": (
        "NeuTRENOGPTAdaptiveLogSoftmax",
        "NeuTRENOGPTForCausalLM",
        "NeuTRENOGPTModel",
        "NeuTRENOGPTPreTrainedModel",
    ),
    "models.modeling_neutreno_vit": (
        "NeuTRENOViTForImageClassification",
        "NeuTRENOViTForSemanticSegmentation",
        "NeuTRENOViTModel",
        "NeuTRENOViTPreTrainedModel",
    ),
    "diagnostics.callback": ("OversmoothingCallback",),
    "value_path": ("apply_value_path", "learned_coefficients", "remove_value_path"),
    "value_path_delta": ("load_value_path", "save_value_path"),
}
_MODULE_OF = {name: module for module, names in _SUBMODULES.items() for name in names}


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_MODULE_OF[name]}", __name__), name)
    globals()[name] = value  # later accesses skip __getattr__
    return value


if "hf_neutreno_cli" not in sys.modules:  # not the command line: register the Auto classes now
    importlib.import_module(".auto_classes", __name__).register_auto_classes()


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})


if TYPE_CHECKING:
    from .diagnostics.callback import OversmoothingCallback
    from .models.configuration_eigen_vit import EigenViTConfig
    from .models.configuration_neutreno_gpt import NeuTRENOGPTConfig
    from .models.configuration_neutreno_vit import NeuTRENOViTConfig
    from .models.modeling_eigen_vit import (
        EigenViTAttention,
        EigenViTForImageClassification,
        EigenViTModel,
        EigenViTPreTrainedModel,
    )
    from .models.modeling_neutreno_gpt import (
        NeuTRENOGPTAdaptiveLogSoftmax,
        NeuTRENOGPTForCausalLM,
        NeuTRENOGPTModel,
        NeuTRENOGPTPreTrainedModel,
    )
    from .models.modeling_neutreno_vit import (
        NeuTRENOViTForImageClassification,
        NeuTRENOViTForSemanticSegmentation,
        NeuTRENOViTModel,
        NeuTRENOViTPreTrainedModel,
    )
    from .value_path import apply_value_path, learned_coefficients, remove_value_path
    from .value_path_delta import load_value_path, save_value_path


__all__ = [
    "EigenViTAttention",
    "EigenViTConfig",
    "EigenViTForImageClassification",
    "EigenViTModel",
    "EigenViTPreTrainedModel",
    "NeuTRENOGPTAdaptiveLogSoftmax",
    "NeuTRENOGPTConfig",
    "NeuTRENOGPTForCausalLM",
    "NeuTRENOGPTModel",
    "NeuTRENOGPTPreTrainedModel",
    "NeuTRENOViTConfig",
    "NeuTRENOViTForImageClassification",
    "NeuTRENOViTForSemanticSegmentation",
    "NeuTRENOViTModel",
    "NeuTRENOViTPreTrainedModel",
    "OversmoothingCallback",
    "apply_value_path",
    "learned_coefficients",
    "load_value_path",
    "remove_value_path",
    "save_value_path",
]
