"""Configuration of the NeuTRENO vision transformer (ViT / DeiT shapes)."""


from transformers import PreTrainedConfig
from transformers.activations import ACT2FN

from .neutreno_common import NeuTRENOConfigRules, PresetsMixin, check_choice, check_heads, check_positive, strict_config

ATTENTION_KERNELS = ("softmax", "linear")
POOLINGS = ("cls", "mean")


def _deit(hidden_size: int, heads: int) -> dict:
    """DeiT shapes (Touvron et al. 2021): 12 layers, MLP ratio 4, patch 16, 224 px, qkv bias, LayerNorm eps 1e-6."""
    return dict(
        hidden_size=hidden_size,
        num_hidden_layers=12,
        num_attention_heads=heads,
        intermediate_size=4 * hidden_size,
        patch_size=16,
        image_size=224,
        layer_norm_eps=1e-6,
        qkv_bias=True,
        hidden_act="gelu",
    )


@strict_config
class NeuTRENOViTConfig(PresetsMixin, NeuTRENOConfigRules, PreTrainedConfig):
    r"""
    Configuration of [`NeuTRENOViTModel`] and [`NeuTRENOViTForImageClassification`]. The defaults are DeiT-tiny
    (the paper's main model): dim 192, 12 layers, 3 heads, patch 16, 224 px, λ = 0.6 in every layer but the first.

    NeuTRENO fields:
        neutreno_lambda (`float`, defaults to 0.6): λ in ``U = A V + λ (V_0 − V)``; 0 gives exactly the plain ViT.
        neutreno_layers (`list[int]`, *optional*): 0-based layers that add the term (default: all but layer 0,
            which provides V_0).
        symmetric_attention (`bool`, defaults to `False`): W_Q = W_K (the paper's Sym-DeiT); the model has no `q_proj`.
        featscale (`bool`, defaults to `False`): add FeatScale (Wang et al., 2022) after each attention output
            projection, ``x + s_d ⊙ mean_tokens(x) + s_h ⊙ (x − mean_tokens(x))`` with zero-initialised s_d, s_h.
        attention_kernel (`str`, defaults to `"softmax"`): `"softmax"`, or `"linear"` for kernel attention with the
            feature map elu(x) + 1 (Katharopoulos et al., 2020; NeuTRENO App. F.2). The linear kernel is computed in
            O(N d²) by this model itself, so `attn_implementation` does not apply to it and it returns no maps.

    Vision fields follow `transformers.ViTConfig`; additions: `pooling` ("cls" or "mean" over patch tokens),
    `drop_path_rate` (stochastic depth, linearly increasing with depth as in timm/DeiT) and
    `use_distillation_token` (DeiT's second prefix token, kept so converted DeiT checkpoints are exact).

    Validation: the annotations fix each field's type (checked on every assignment); the `validate_*` methods hold
    the rules on values, run at construction, by `config.validate()`, by `save_pretrained` and by the models.
    """

    model_type = "neutreno_vit"
    dropout_fields = ("hidden_dropout_prob", "attention_probs_dropout_prob", "drop_path_rate")
    presets = {
        "deit-tiny": _deit(192, 3),
        "deit-small": _deit(384, 6),
        "deit-base": _deit(768, 12),
        # DeiT-tiny's width and depth for 32×32 images (CIFAR), patch 4: 64 patch tokens.
        "vit-tiny": dict(_deit(192, 3), image_size=32, patch_size=4),
        # A small model for 8×8 images (scikit-learn's digits): the offline demo of `hf-neutreno compare`.
        "vit-micro": dict(_deit(64, 4), num_hidden_layers=6, image_size=8, patch_size=2),
    }

    hidden_size: int = 192
    num_hidden_layers: int = 12
    num_attention_heads: int = 3
    intermediate_size: int = 768
    hidden_act: str = "gelu"
    hidden_dropout_prob: float | int = 0.0
    attention_probs_dropout_prob: float | int = 0.0
    drop_path_rate: float | int = 0.0
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-6
    image_size: int | list[int] | tuple[int, int] = 224
    patch_size: int | list[int] | tuple[int, int] = 16
    num_channels: int = 3
    qkv_bias: bool = True
    pooling: str = "cls"
    use_distillation_token: bool = False
    neutreno_lambda: float | int = 0.6
    neutreno_layers: list[int] | None = None
    symmetric_attention: bool = False
    featscale: bool = False
    attention_kernel: str = "softmax"

    def validate_architecture(self) -> None:
        super().validate_architecture()
        check_positive(self, ("num_hidden_layers", "num_channels", "intermediate_size"))
        check_heads(self.hidden_size, self.num_attention_heads)
        check_choice("attention_kernel", self.attention_kernel, ATTENTION_KERNELS)
        check_choice("pooling", self.pooling, POOLINGS)
        check_choice("hidden_act", self.hidden_act, sorted(ACT2FN))
        image_size, patch_size = self.image_size_2d, self.patch_size_2d
        for name, size in (("image_size", image_size), ("patch_size", patch_size)):
            if len(size) != 2 or min(size) < 1:
                raise ValueError(f"`{name}` must be an integer >= 1 or [height, width], got {getattr(self, name)!r}.")
        if any(s % p for s, p in zip(image_size, patch_size)):
            raise ValueError(f"`image_size` {list(image_size)} must be divisible by `patch_size` {list(patch_size)}.")

    @property
    def image_size_2d(self) -> tuple[int, int]:
        size = self.image_size
        return (size, size) if isinstance(size, int) else tuple(size)

    @property
    def patch_size_2d(self) -> tuple[int, int]:
        size = self.patch_size
        return (size, size) if isinstance(size, int) else tuple(size)

    @property
    def num_prefix_tokens(self) -> int:
        return 1 + int(self.use_distillation_token)


__all__ = ["NeuTRENOViTConfig"]
