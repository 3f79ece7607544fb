"""The presets of this package's configs, ``{name: {field: value}}`` (``Config.from_preset(name, **overrides)``).

A flat sibling of the configuration files, which import it, so it travels with every checkpoint. It imports nothing:
`hf_neutreno.names` reads the preset names from it without importing transformers, for a fast `hf-neutreno
--help`.
"""


# `NeuTRENOViTConfig`'s defaults are DeiT-tiny (Touvron et al. 2021): 12 layers, dim 192, 3 heads, MLP ratio 4, patch
# 16, 224 px, qkv bias, LayerNorm eps 1e-6. Each preset lists only what differs from them.
def _deit(hidden_size: int, heads: int) -> dict:
    """A DeiT of another width (MLP ratio 4)."""
    return dict(hidden_size=hidden_size, num_attention_heads=heads, intermediate_size=4 * hidden_size)


NEUTRENO_VIT_PRESETS = {
    "deit-tiny": {},
    "deit-small": _deit(384, 6),
    "deit-base": _deit(768, 12),
    # DeiT-tiny's width and depth for 32×32 images (CIFAR), patch 4: 64 patch tokens.
    "vit-tiny": dict(image_size=32, patch_size=4),
    # A small model for 8×8 images (scikit-learn's digits): the offline demo of `hf-neutreno compare`.
    "vit-micro": dict(_deit(64, 4), num_hidden_layers=6, image_size=8, patch_size=2),
    # Segmenter on ADE20K (NeuTRENO Table 2): DeiT-tiny at 512 × 512 crops, drop path 0.1 (Segmenter's training
    # default), a 2-block mask transformer of the encoder's width and heads (the decoder's defaults), 150 classes.
    # `decoder_type` marks a Segmenter preset (`hf_neutreno.names` reads it).
    "segmenter-deit-tiny": dict(image_size=512, drop_path_rate=0.1, num_labels=150, decoder_type="mask_transformer"),
    # The same Segmenter at vit-micro's width and depth for 64 × 64 images, patch 8 (64 patch tokens): the CPU
    # demo of `hf-neutreno compare` on fashion-scenes. The classes come from the dataset.
    "segmenter-micro": dict(
        _deit(64, 4), num_hidden_layers=6, image_size=64, patch_size=8, decoder_type="mask_transformer"
    ),
}

# The Setting-the-Record-Straight paper's ViT-Ti is DeiT-tiny's shape; `vit-tiny-224` names it at 224 px.
EIGEN_VIT_PRESETS = {**NEUTRENO_VIT_PRESETS, "vit-tiny-224": {}}


# `NeuTRENOGPTConfig`'s defaults are the paper's WikiText-103 model (lmtool-fwp "small", Transformer-XL code without
# memory, attn_type 2 / 222) with a full softmax: each preset lists only what differs from them.
_WIKITEXT103_SMALL = dict(adaptive_softmax_cutoffs=[20000, 40000, 200000])

NEUTRENO_GPT_PRESETS = {
    "wikitext103-small": _WIKITEXT103_SMALL,
    # GPT-2 small (124M): the shape `hf_neutreno.convert.gpt2_to_neutreno` produces from `openai-community/gpt2`.
    "gpt2-small": dict(
        vocab_size=50257,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        hidden_act="gelu_new",
        max_position_embeddings=1024,
        position_embedding_type="learned",
        norm_position="pre",
        attention_bias=True,
        lm_head_bias=False,
        scale_embeddings=False,
        attention_dropout=0.1,
        activation_dropout=0.0,
        output_dropout=0.0,
        bos_token_id=50256,
        eos_token_id=50256,
    ),
    # The paper's design (post-LN, sinusoidal positions, adaptive softmax) at `vit-micro`'s size, for a quick CPU
    # run of `hf-neutreno compare` on WikiText-2: 6 layers, dim 64, 4 heads, FFN 256, context 64.
    "gpt-micro": dict(
        vocab_size=33279,  # WikiText-2 words + <eos> + <pad>, as `train_word_tokenizer` counts them
        hidden_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=64,
        adaptive_softmax_cutoffs=[2000, 10000],
    ),
}
