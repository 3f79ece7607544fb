"""The results page's opening "which remedy" table as data: its task columns, and one row per method whose cells
name claims of `reproduce_claims.CLAIMS` and whose cost columns name rows of the speed benchmarks' JSON."""

# The opening table: its task columns ({key: (heading, the baseline's name in a sentence)}) and one row per method,
# each cell a claim id, "n/a" (the method does not apply) or absent (not run).
TASKS = {
    "scratch": ("CIFAR-10 from scratch", "the ViT on CIFAR-10 from scratch"),
    "adaptation": ("adapting a trained ViT", "continued softmax training when adapting a trained ViT"),
    "data10": ("10 % of the data", "the ViT with 10 % of the data"),
    "wikitext": ("WikiText-2 (test perplexity)", "the softmax LM on WikiText-2"),
    "segmentation": ("segmentation from trained encoders", "the ViT encoder in segmentation"),
}
NEUTRENO_COST = dict(
    throughput=[
        ("vit.json", {"image_size": 224, "mode": "train"}, "throughput ratio", "ViT"),
        ("gpt.json", {"shape": "paper"}, "train throughput ratio", "LM"),
    ],
    memory=[
        ("vit.json", {"image_size": 224, "mode": "train"}, "total memory ratio", "ViT"),
        ("gpt.json", {"shape": "paper"}, "total memory ratio", "LM"),
    ],
)


def value_path_cost(model: str) -> dict:
    """The value path benchmark's rows of `model` (benchmarks/results/value_path.json), on a ViT and a GPT-2."""
    rows = [({"shape": "vit-tiny", "model": model}, "ViT"), ({"shape": "gpt2-small", "model": model}, "LM")]
    return {
        cost: [("value_path.json", where, field, label) for where, label in rows]
        for cost, field in (("throughput", "throughput ratio"), ("memory", "total memory ratio"))
    }


METHODS = {
    "neutreno": dict(
        name="NeuTRENO at the official λ (ViT 0.6, LM 0.4)",
        scratch="cifar-neutreno",
        wikitext="lm-test-blocks",
        segmentation="segment-pretrained",
        cosine="cosine-trained",
        hfc="hfc-neutreno",
        **NEUTRENO_COST,
    ),
    "neutreno-validated": dict(
        name="NeuTRENO at the validated λ",
        scratch="cifar-neutreno-validated",
        adaptation="adapt-accuracy",
        cosine="cosine-neutreno-validated",
        hfc="hfc-neutreno-validated",
        **NEUTRENO_COST,
    ),
    "neutreno-learnable": dict(
        name="NeuTRENO, learnable λ",
        scratch="valuepath-cifar-neutreno-learnable",
        wikitext="valuepath-lm-neutreno-learnable",
        cosine="cosine-neutreno-learnable",
        hfc="hfc-neutreno-learnable",
        **value_path_cost("NeuTRENO, learnable λ"),
    ),
    "value-residual": dict(
        name="value residual (fixed mix)",
        scratch="valuepath-cifar-value-residual",
        wikitext="valuepath-lm-value-residual",
        cosine="cosine-value-residual",
        hfc="hfc-value-residual",
        **value_path_cost("value residual"),
    ),
    "value-residual-learnable": dict(
        name="value residual, learnable mix",
        scratch="valuepath-cifar-value-residual-learnable",
        wikitext="valuepath-lm-value-residual-learnable",
        cosine="cosine-value-residual-learnable",
        hfc="hfc-value-residual-learnable",
        **value_path_cost("value residual, learnable α"),
    ),
    "value-residual-gate": dict(
        name="value residual, mix gated per token and head",
        scratch="valuepath-cifar-value-residual-gate",
        wikitext="valuepath-lm-value-residual-gate",
        cosine="cosine-value-residual-gate",
        hfc="hfc-value-residual-gate",
        **value_path_cost("value residual, gate"),
    ),
    "twicing": dict(
        name="twicing attention (ViT: every layer; LM: the last 2)",
        scratch="valuepath-cifar-twicing",
        wikitext="valuepath-lm-twicing",
        cosine="cosine-twicing",
        hfc="hfc-twicing",
        **value_path_cost("twicing"),
    ),
    "vit-": dict(
        name="ViT⁻",
        scratch="cifar-vit-minus",
        adaptation="n/a",
        data10="data10-vit-minus",
        wikitext="n/a",
        cosine="cosine-vit-",
        hfc="hfc-vit-",
        throughput=[("eigen_vit.json", {"model": "EigenViT (ViT⁻)"}, "train ratio", "ViT")],
        memory=[],
    ),
}
