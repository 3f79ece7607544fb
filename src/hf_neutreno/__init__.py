"""hf-neutreno: NeuTRENO and eigen-parameterised transformers for the Hugging Face ecosystem.

Importing the package registers every config and model with the Auto classes and marks them for remote code, so
that `save_pretrained` and Trainer checkpoints carry their code and `auto_map`. `apply_value_path` puts NeuTRENO or
the value residual on any transformers model (it registers its attention function only when called).
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForImageClassification,
    AutoModelForSemanticSegmentation,
)

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

__version__ = "0.1.0"

# (config, {Auto class: model class}); the first Auto class of each model is the one `save_pretrained` records.
_REGISTRY = [
    (
        NeuTRENOViTConfig,
        {
            AutoModel: NeuTRENOViTModel,
            AutoModelForImageClassification: NeuTRENOViTForImageClassification,
            AutoModelForSemanticSegmentation: NeuTRENOViTForSemanticSegmentation,
        },
    ),
    (
        EigenViTConfig,
        {AutoModel: EigenViTModel, AutoModelForImageClassification: EigenViTForImageClassification},
    ),
    (
        NeuTRENOGPTConfig,
        {AutoModel: NeuTRENOGPTModel, AutoModelForCausalLM: NeuTRENOGPTForCausalLM},
    ),
]


def _register() -> None:
    for config_class, models in _REGISTRY:
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        config_class.register_for_auto_class()
        for auto_class, model_class in models.items():
            auto_class.register(config_class, model_class, exist_ok=True)
            model_class.register_for_auto_class(auto_class.__name__)


_register()


def __getattr__(name: str):
    # The diagnostics import the Trainer machinery: load them on first use to keep `import hf_neutreno` fast.
    if name == "OversmoothingCallback":
        from .diagnostics.callback import OversmoothingCallback

        return OversmoothingCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
