"""Configuration of the NeuTRENO GPT causal language model (the paper's WikiText-103 model and GPT-2 shapes)."""

from typing import ClassVar, Literal

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

from .neutreno_common import (
    TRANSFORMER_SHAPE_FIELDS,
    NeuTRENOConfigMixin,
    activation_field,
    dropout_field,
    neutreno_lambda_field,
    neutreno_layers_field,
    positive_int_field,
)
from .presets import NEUTRENO_GPT_PRESETS


@strict
class NeuTRENOGPTConfig(NeuTRENOConfigMixin, PreTrainedConfig):
    r"""
    Configuration of [`NeuTRENOGPTModel`] and [`NeuTRENOGPTForCausalLM`]. The defaults are the paper's WikiText-103
    model (16 layers, dim 128, 8 heads, FFN 2048 ReLU, context 256, post-LN, sinusoidal positions, dropout 0.1,
    λ = 0.4) with a full softmax; the preset `wikitext103-small` adds its adaptive softmax, whose cutoffs depend on
    the vocabulary. Presets: `NeuTRENOGPTConfig.from_preset(name, **overrides)` with `wikitext103-small`,
    `gpt2-small` or `gpt-micro` (a small model for a quick CPU run).

    NeuTRENO fields:
        neutreno_lambda (`float`, defaults to 0.4): λ in ``U = A V + λ (V_0 − V)``; 0 gives the plain transformer.
        neutreno_layers (`list[int]`, *optional*): 0-based layers that add the term (default: all but layer 0,
            which provides V_0), each in [1, num_hidden_layers - 1]: checked when the list is set, and by a built
            model at every forward (an in-place edit of the list).

    Architecture fields:
        norm_position (`str`, defaults to `"post"`): `"post"` (LayerNorm after each residual sum, as the paper's
            Transformer-XL code) or `"pre"` (GPT-2; the model then ends with a final LayerNorm `model.norm`).
        position_embedding_type (`str`, defaults to `"sinusoidal"`): `"sinusoidal"` (no parameters, computed from
            the position ids; `[sin, cos]` halves as Transformer-XL) or `"learned"` (a table, as GPT-2).
        max_position_embeddings (`int`, defaults to 256): the longest sequence (cache included) the model accepts;
            the size of the learned table. Sinusoidal positions have no table: raise it freely to generate longer.
        attention_bias (`bool`, defaults to `False`): biases of `qkv_proj` and `o_proj`.
        scale_embeddings (`bool`, defaults to `True`): multiply token embeddings by √hidden_size (Transformer-XL).
        lm_head_bias (`bool`, defaults to `True`): a per-token output bias (and a per-cluster bias with an
            adaptive softmax); the paper's model has one, GPT-2 has none.
        adaptive_softmax_cutoffs (`list[int]`, *optional*): sorted token ids that split the vocabulary into a
            shortlist and tail clusters (Grave et al. 2017; the paper: `[20000, 40000, 200000]`). The output layer
            is then a tied adaptive log-softmax whose "logits" are exact log-probabilities; token ids must be
            sorted by frequency (the tokenizers of `hf_neutreno.data.text` are).
        tie_word_embeddings (`bool`, defaults to `True`): output rows = input embedding rows.

    Dropout fields (all in [0, 1)): `embedding_dropout` (token + position embeddings), `attention_dropout`
    (attention probabilities only, not the NeuTRENO term), `hidden_dropout` (the output of each residual branch),
    `activation_dropout` (inside the MLP, after the activation), `output_dropout` (the final hidden states before
    the LM head, as Transformer-XL).

    Validation (`@strict`, as every transformers config): each field's type and its own rule (e.g. λ finite and
    >= 0) are checked on every assignment, so a bad value is refused where it is written; the rules across fields
    are the `validate_*` methods, run at construction, by `config.validate()`, by the models and, before anything
    is written, by `save_pretrained`.

    Settings a built model reads at each forward, so editing them on `model.config` takes effect at once:
    `neutreno_lambda`, `neutreno_layers`, `max_position_embeddings` (sinusoidal positions). The other fields fix the
    model's parameters and blocks when it is built (`architecture_fields`): a model refuses to run or be saved once
    one of them was edited on its config (pass them to the constructor or to `from_pretrained` instead).
    """

    model_type = "neutreno_gpt"
    # Fixed when a model is built (its parameters, blocks, dropout rates): the models refuse to run or be saved once
    # one was edited on their config. The other fields are read at each forward, kept in step by transformers
    # (`vocab_size` by `resize_token_embeddings`), or only initialise the weights.
    architecture_fields: ClassVar[tuple[str, ...]] = (
        *TRANSFORMER_SHAPE_FIELDS,
        "position_embedding_type",
        "norm_position",
        "layer_norm_eps",
        "attention_bias",
        "scale_embeddings",
        "lm_head_bias",
        "adaptive_softmax_cutoffs",
        "embedding_dropout",
        "attention_dropout",
        "hidden_dropout",
        "activation_dropout",
        "output_dropout",
    )
    keys_to_ignore_at_inference = ["cache", "past_key_values"]  # the cache's names from / before transformers 5.24
    presets = NEUTRENO_GPT_PRESETS

    vocab_size: int = positive_int_field("vocab_size", 267735)
    hidden_size: int = positive_int_field("hidden_size", 128)
    num_hidden_layers: int = positive_int_field("num_hidden_layers", 16)
    num_attention_heads: int = positive_int_field("num_attention_heads", 8)
    intermediate_size: int = positive_int_field("intermediate_size", 2048)
    hidden_act: str = activation_field("relu")
    max_position_embeddings: int = positive_int_field("max_position_embeddings", 256)
    position_embedding_type: Literal["learned", "sinusoidal"] = "sinusoidal"
    norm_position: Literal["pre", "post"] = "post"
    layer_norm_eps: float = 1e-5
    attention_bias: bool = False
    scale_embeddings: bool = True
    lm_head_bias: bool = True
    adaptive_softmax_cutoffs: list[int] | None = None
    embedding_dropout: float | int = dropout_field("embedding_dropout", 0.1)
    attention_dropout: float | int = dropout_field("attention_dropout", 0.0)
    hidden_dropout: float | int = dropout_field("hidden_dropout", 0.1)
    activation_dropout: float | int = dropout_field("activation_dropout", 0.1)
    output_dropout: float | int = dropout_field("output_dropout", 0.1)
    initializer_range: float = 0.02
    neutreno_lambda: float | int = neutreno_lambda_field(0.4)
    neutreno_layers: list[int] | None = neutreno_layers_field()
    use_cache: bool = True
    tie_word_embeddings: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    def validate_architecture(self) -> None:
        super().validate_architecture()  # and `hidden_size` divisible by `num_attention_heads`
        if self.position_embedding_type == "sinusoidal" and self.hidden_size % 2:
            raise ValueError(f"Sinusoidal positions need an even `hidden_size`, got {self.hidden_size}.")
        cutoffs = self.adaptive_softmax_cutoffs
        if cutoffs is not None and (
            not cutoffs or cutoffs != sorted(set(cutoffs)) or cutoffs[0] < 1 or cutoffs[-1] >= self.vocab_size
        ):
            raise ValueError(
                "`adaptive_softmax_cutoffs` must be a non-empty, strictly increasing list of integers in "
                f"[1, vocab_size - 1] = [1, {self.vocab_size - 1}] (or None for a full softmax), got {cutoffs!r}."
            )


__all__ = ["NeuTRENOGPTConfig"]
