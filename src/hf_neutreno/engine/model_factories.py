"""Models from presets: an image classifier of any variant, a language model for a tokenizer, a Segmenter.

    from hf_neutreno.engine.model_factories import image_classifier
    model = image_classifier("vit-minus", "vit-tiny", labels=names)   # ViT⁻ in the shape of the poster's ViT-Ti

`hf-neutreno compare`, `experiments/evidence/reproduce.py` and the example scripts build their models from presets here.
"""

import copy

from ..models.configuration_eigen_vit import EigenViTConfig
from ..models.configuration_neutreno_gpt import NeuTRENOGPTConfig
from ..models.configuration_neutreno_vit import NeuTRENOViTConfig
from ..models.modeling_eigen_vit import EigenViTForImageClassification
from ..models.modeling_neutreno_gpt import NeuTRENOGPTForCausalLM
from ..models.modeling_neutreno_vit import NeuTRENOViTForImageClassification, NeuTRENOViTForSemanticSegmentation
from ..names import IMAGE_PRESETS, LANGUAGE_MODEL_PRESETS, SEGMENTATION_PRESETS
from .variants import VARIANTS

# The variants (`hf_neutreno.engine.variants`) an image classifier preset builds: "softmax" and "neutreno" are NeuTRENO
# ViTs (λ = 0 and λ > 0), "vit-minus" and "vit-plus" EigenViTs.
IMAGE_VARIANTS = tuple(name for name, v in VARIANTS.items() if v.method is None or name == "neutreno" or v.preset_only)


def _labels(labels: list[str]) -> dict:
    id2label = dict(enumerate(labels))
    return {"id2label": id2label, "label2id": {name: index for index, name in id2label.items()}}


def image_classifier(
    variant: str,
    preset: str,
    labels: list[str],
    *,
    neutreno_lambda: float | None = None,
    eigenvalue_range: list[float] | None = None,
    **config,
):
    """A classifier of `variant` (`IMAGE_VARIANTS`) in the shape of `preset`, for `labels`; `config` overrides any
    config field (`num_hidden_layers`, `drop_path_rate`, ...). `neutreno_lambda` (None: the preset's) is NeuTRENO's;
    `eigenvalue_range` is ViT⁻'s, and ViT⁺ gets it mirrored."""
    if variant not in IMAGE_VARIANTS:
        raise ValueError(f"Unknown image variant {variant!r}; choose from {list(IMAGE_VARIANTS)}.")
    if preset not in EigenViTConfig.presets:
        raise ValueError(f"Unknown image preset {preset!r}; choose from {IMAGE_PRESETS}.")
    fields = {**copy.deepcopy(EigenViTConfig.presets[preset]), **_labels(labels), **config}
    if variant in ("softmax", "neutreno"):
        if variant == "softmax":
            fields["neutreno_lambda"] = 0.0
        elif neutreno_lambda is not None:
            fields["neutreno_lambda"] = neutreno_lambda
        return NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**fields))
    sign = "negative" if variant == "vit-minus" else "positive"
    if eigenvalue_range is not None and sign == "positive":
        low, high = eigenvalue_range
        eigenvalue_range = [-high, -low]
    config = EigenViTConfig(**fields, spectrum_sign=sign, eigenvalue_range=eigenvalue_range)
    return EigenViTForImageClassification(config)


def language_model(preset: str, tokenizer, *, block_size: int | None = None, **config) -> NeuTRENOGPTForCausalLM:
    """A NeuTRENO GPT of `preset` for `tokenizer`'s vocabulary and special tokens; `config` overrides any config
    field. The preset's adaptive-softmax cutoffs that do not fit the vocabulary are dropped. With `block_size`, the
    model records its training context as `max_position_embeddings` (evaluate-lm's default window)."""
    if preset not in NeuTRENOGPTConfig.presets:
        raise ValueError(f"Unknown language-model preset {preset!r}; choose from {LANGUAGE_MODEL_PRESETS}.")
    vocab_size = len(tokenizer)
    cutoffs = [c for c in NeuTRENOGPTConfig.presets[preset].get("adaptive_softmax_cutoffs") or () if c < vocab_size]
    fields = dict(
        vocab_size=vocab_size,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        adaptive_softmax_cutoffs=cutoffs or None,
    )
    if block_size is not None:
        fields["max_position_embeddings"] = block_size
    fields.update(config)
    return NeuTRENOGPTForCausalLM(NeuTRENOGPTConfig.from_preset(preset, **fields))


def segmenter(preset: str, labels: list[str], **config) -> NeuTRENOViTForSemanticSegmentation:
    """A Segmenter (NeuTRENO ViT encoder and mask transformer) of `preset` (`SEGMENTATION_PRESETS`, or any NeuTRENO
    ViT preset given the decoder fields in `config`) for `labels`; `config` overrides any config field
    (`neutreno_lambda` sets the encoder's λ and, unless `decoder_neutreno_lambda` is given, the decoder's)."""
    if preset not in NeuTRENOViTConfig.presets:
        raise ValueError(f"Unknown preset {preset!r}; choose from {sorted(NeuTRENOViTConfig.presets)}.")
    fields = {k: v for k, v in NeuTRENOViTConfig.presets[preset].items() if k != "num_labels"}
    fields = {**copy.deepcopy(fields), **_labels(labels), **config}
    return NeuTRENOViTForSemanticSegmentation(NeuTRENOViTConfig(**fields))


__all__ = [
    "IMAGE_PRESETS",
    "IMAGE_VARIANTS",
    "LANGUAGE_MODEL_PRESETS",
    "SEGMENTATION_PRESETS",
    "image_classifier",
    "language_model",
    "segmenter",
]
