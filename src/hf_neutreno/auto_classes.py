"""The package's configs and models registered with the Auto classes (`register_auto_classes`), and marked for remote
code, so that `AutoModel*.from_pretrained` loads a folder of this package without `trust_remote_code`, and
`save_pretrained` and Trainer checkpoints carry their code and `auto_map`. `import hf_neutreno` calls it; the
`hf-neutreno` command calls it where a command loads a model (its `--help` needs neither torch nor transformers).
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
from .models.modeling_eigen_vit import EigenViTForImageClassification, EigenViTModel
from .models.modeling_neutreno_gpt import NeuTRENOGPTForCausalLM, NeuTRENOGPTModel
from .models.modeling_neutreno_vit import (
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


def register_auto_classes() -> None:
    """Register every config and model with the Auto classes and mark them for remote code (idempotent)."""
    for config_class, models in _REGISTRY:
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        config_class.register_for_auto_class()
        for auto_class, model_class in models.items():
            auto_class.register(config_class, model_class, exist_ok=True)
            model_class.register_for_auto_class(auto_class.__name__)
