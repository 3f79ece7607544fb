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
    """The value path benchmark's rows of `model` (experiments/benchmarks/results/value_path.json), on a ViT and a
    GPT-2."""
    rows = [({"shape": "vit-tiny", "model": model}, "ViT"), ({"shape": "gpt2-small", "model": model}, "LM")]
    return {
        cost: [("value_path.json", where, field, label) for where, label in rows]
        for cost, field in (("throughput", "throughput ratio"), ("memory", "total memory ratio"))
    }


def value_path_method(method: str, name: str, benchmark_model: str) -> dict:
    """A value path's row: its CIFAR-10 and WikiText-2 claims, its over-smoothing comparisons and its cost in the
    value path benchmark (where it is named `benchmark_model`)."""
    return dict(
        name=name,
        scratch=f"valuepath-cifar-{method}",
        wikitext=f"valuepath-lm-{method}",
        cosine=f"cosine-{method}",
        hfc=f"hfc-{method}",
        **value_path_cost(benchmark_model),
    )


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
    **{
        method: value_path_method(method, name, benchmark_model)
        for method, name, benchmark_model in (
            ("neutreno-learnable", "NeuTRENO, learnable λ", "NeuTRENO, learnable λ"),
            ("value-residual", "value residual (fixed mix)", "value residual"),
            ("value-residual-learnable", "value residual, learnable mix", "value residual, learnable α"),
            ("value-residual-gate", "value residual, mix gated per token and head", "value residual, gate"),
            ("twicing", "twicing attention (ViT: every layer; LM: the last 2)", "twicing"),
            ("xsa", "XSA, exclusive self-attention (every layer)", "XSA"),
        )
    },
    "value-embedding": dict(
        name="value embeddings (LM: every other layer)",
        scratch="n/a",
        adaptation="n/a",
        data10="n/a",
        segmentation="n/a",
        wikitext="valuepath-lm-value-embedding",
        cosine="n/a",  # the over-smoothing measures are the ViT's
        hfc="n/a",
        **value_path_cost("value embeddings"),
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
