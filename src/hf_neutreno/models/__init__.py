"""This package's configs and models; importing it registers them with the Auto classes.

Importing `hf_neutreno.models` (which any access to a config or model class of `hf_neutreno` does) registers every
config and model with the Auto classes and marks them for remote code, so that `save_pretrained` and Trainer
checkpoints carry their code and `auto_map`.

The other files here travel with a checkpoint (`trust_remote_code`): each is a flat sibling that imports only torch,
transformers and the others; `save_pretrained` copies the model's file and its relative imports next to the weights.
This file is never copied, so the registration stays with the package.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForImageClassification,
    AutoModelForSemanticSegmentation,
)

from .configuration_eigen_vit import EigenViTConfig
from .configuration_neutreno_gpt import NeuTRENOGPTConfig
from .configuration_neutreno_vit import NeuTRENOViTConfig
from .modeling_eigen_vit import EigenViTForImageClassification, EigenViTModel
from .modeling_neutreno_gpt import NeuTRENOGPTForCausalLM, NeuTRENOGPTModel
from .modeling_neutreno_vit import (
    NeuTRENOViTForImageClassification,
    NeuTRENOViTForSemanticSegmentation,
    NeuTRENOViTModel,
)

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
