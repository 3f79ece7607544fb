"""What `reproduce_report.py` puts on the results page, as data: the models each table shows, the claims each paired
comparison tests (with the paper's direction and numbers), and the opening "which remedy" table.

A *series* is a unit's name without its `-seed<k>` suffix (`cifar-vit-100pct`, `lm-softmax`, `adapt-neutreno`); in a
series `*` matches the λ the sweep chose (only one is ever trained). A *measure* names a number read from a unit:
`accuracy`, `cosine:<stage>` / `hfc:<stage>` (last-layer token cosine similarity / ‖HFC‖/‖LFC‖, stage `init` or
`trained`), `ppl:<split>:<protocol>` (WikiText perplexity), `corruption_change` (mean accuracy over the corruptions at
severity 5 minus clean), `mean_iou`, `mean_iou_ms`, `pixel_accuracy` (`reproduce_results.Measure`; these are their
keys). Series are asked of the plans (`reproduce_plans`), never spelled here.
"""

from .reproduce_plans import ADAPT, CIFAR, KERNEL, LM, PARENT, SEGMENT, VALIDATED, VALUE_PATH
from .reproduce_results import ACCURACY, Measure

COSINE, HFC = Measure("cosine", "trained"), Measure("hfc", "trained")  # the last layer's


def cifar(variant: str, fraction: float = 1.0) -> str:
    return CIFAR.of(variant=variant, fraction=fraction)


def value_path(task: str, method: str) -> str:
    return VALUE_PATH.of(task=task, variant=method)


# The models of each table: {key in the experiment's JSON: (series, name on the page[, the paper's number])}.
CIFAR_MODELS = {
    "vit": (cifar("vit"), "ViT", "DeiT-tiny 72.17 (ImageNet); ViT-Ti 66.78 (CIFAR-100)"),
    "neutreno": (
        cifar("neutreno"),
        "NeuTRENO ViT (λ 0.6)",
        "73.01 (ImageNet, +0.84 over DeiT-tiny); CIFAR-10 kernel attention 75.89 → 76.75",
    ),
    "neutreno-validated": (VALIDATED.of(), "NeuTRENO ViT (validated λ)", "—"),
    "neutreno-learnable": (value_path("cifar", "neutreno-learnable"), "NeuTRENO ViT, learnable λ", "—"),
    "value-residual": (value_path("cifar", "value-residual"), "value residual ViT", "—"),
    "value-residual-learnable": (
        value_path("cifar", "value-residual-learnable"),
        "value residual ViT, learnable mix",
        "—",
    ),
    "value-residual-gate": (value_path("cifar", "value-residual-gate"), "value residual ViT, gated mix", "—"),
    "twicing": (value_path("cifar", "twicing"), "twicing ViT", "—"),
    "xsa": (value_path("cifar", "xsa"), "XSA ViT", "—"),
    "vit-": (cifar("vit-"), "ViT⁻", "66.62 (CIFAR-100, −0.16 vs ViT-Ti)"),
    "vit+": (cifar("vit+"), "ViT⁺", "64.34 (CIFAR-100, −2.44 vs ViT-Ti)"),
}
CIFAR_NAMES = {k: (series, name) for k, (series, name, _) in CIFAR_MODELS.items()}  # tables without the paper's
# The poster's Table 2 (CIFAR-100, ViT-Ti; % of the training data kept) beside ours.
EFFICIENCY_MODELS = {
    f"{v}-{pct}": (cifar(v, int(pct) / 100), f"{name}, {pct} %", paper)
    for pct, papers in (
        ("100", ("66.78 ± 0.1", "66.62 ± 0.3")),
        ("50", ("56.38 ± 0.5", "56.58 ± 0.3")),
        ("10", ("32.47 ± 0.9", "33.99 ± 0.4")),
    )
    for (v, name), paper in zip((("vit", "ViT"), ("vit-", "ViT⁻")), papers)
}
PAPER_CORRUPTIONS = {  # the poster's Table 3 (CIFAR-100): mean over corruptions, severities 0-5
    "vit": [66.78, 61.59, 57.75, 53.12, 49.32, 39.17],
    "vit-": [66.62, 61.62, 58.00, 53.56, 49.70, 40.07],
}
PAPER_SMOOTHING = {  # the poster's Table 1: share of cases where 1 + λ^H λ_n^A dominates, %
    "init vit": "100 (random-init ViT-B/16)",
    "trained vit": "98.92 (CIFAR-100 ViT-Ti); 70.27 (ImageNet ViT-B/16)",
    "trained vit+": "100 (CIFAR-100 ViT-Ti⁺)",
    "trained vit-": "0 (CIFAR-100 ViT-Ti⁻)",
}
LM_MODELS = {
    "softmax": (LM.of(variant="softmax"), "softmax (λ 0)"),
    "neutreno": (LM.of(variant="neutreno"), "NeuTRENO (λ 0.4)"),
    "neutreno-learnable": (value_path("lm", "neutreno-learnable"), "NeuTRENO, learnable λ"),
    "value-residual": (value_path("lm", "value-residual"), "value residual"),
    "value-residual-learnable": (value_path("lm", "value-residual-learnable"), "value residual, learnable mix"),
    "value-residual-gate": (value_path("lm", "value-residual-gate"), "value residual, gated mix"),
    "twicing": (value_path("lm", "twicing"), "twicing (last 2 layers)"),
    "xsa": (value_path("lm", "xsa"), "XSA"),
    "value-embedding": (value_path("lm", "value-embedding"), "value embeddings"),
}
PARENT_MODELS = {v: (PARENT.of(variant=v), cifar(v)) for v in ("vit", "neutreno")}


def _versus(models: dict, baseline: str) -> tuple:
    return tuple((key, baseline) for key in models if key != baseline)


# The page's tables: {experiment: (models, the measures in its columns, the (variant, baseline) pairs of its Δ rows)}.
# The over-smoothing layers and the corruptions' names are read from the units.
EXPERIMENTS = {
    "cifar10_accuracy": (CIFAR_MODELS, (ACCURACY,), _versus(CIFAR_MODELS, "vit")),
    "oversmoothing": (CIFAR_NAMES, (), ()),
    "spectral": (
        CIFAR_NAMES,
        tuple(
            Measure("spectral", stage, category=c)
            for stage in ("init", "trained")
            for c in ("smoothing", "sharpening", "other", "tie")
        ),
        (),
    ),
    "data_efficiency": (EFFICIENCY_MODELS, (ACCURACY,), tuple((f"vit--{p}", f"vit-{p}") for p in (100, 50, 10))),
    "corruptions": (
        {k: CIFAR_NAMES[k] for k in ("vit", "vit-")},
        (*(Measure("corruption", severity=s) for s in range(6)), Measure("corruption_change")),
        (("vit-", "vit"),),
    ),
    "adaptation": (
        {
            "vit": (ADAPT.of(variant="vit"), "ViT, continued softmax training"),
            "neutreno": (ADAPT.of(variant="neutreno"), "NeuTRENO adaptation (validated λ)"),
        },
        (ACCURACY, COSINE),
        (("neutreno", "vit"),),
    ),
    "kernel": (
        {
            "vit": (KERNEL.of(variant="vit"), "linear attention (elu + 1)"),
            "neutreno": (KERNEL.of(variant="neutreno"), "linear attention + NeuTRENO (λ 0.6)"),
        },
        (ACCURACY, COSINE, HFC),
        (("neutreno", "vit"),),
    ),
    "segmentation": (
        {
            "vit": (SEGMENT.of(variant="vit"), "ViT encoder, trained"),
            "neutreno": (SEGMENT.of(variant="neutreno"), "NeuTRENO encoder, trained"),
            "scratch-vit": (SEGMENT.of(variant="scratch-vit"), "ViT encoder, from scratch"),
            "scratch-neutreno": (SEGMENT.of(variant="scratch-neutreno"), "NeuTRENO encoder, from scratch"),
        },
        (Measure("mean_iou"), Measure("mean_iou_ms"), Measure("pixel_accuracy"), COSINE),
        (("neutreno", "vit"), ("scratch-neutreno", "scratch-vit")),
    ),
    "wikitext2": (
        LM_MODELS,
        tuple(Measure("ppl", split=sp, protocol=pr) for sp in ("validation", "test") for pr in ("sliding", "blocks")),
        _versus(LM_MODELS, "softmax"),
    ),
}


def claim(id, title, variant, baseline, measure, sign, paper, only_with_curve=False):
    """One paired comparison, `variant − baseline` per seed. `sign`: the paper's direction (+1: the variant's value
    should be higher, −1: lower; 0: a measurement with no claim to test, shown but given no verdict).
    `only_with_curve`: tested only in runs whose language models recorded a learning curve (the small tier
    reported the sliding window alone, decided before it ran)."""
    return dict(
        id=id,
        title=title,
        variant=variant,
        baseline=baseline,
        measure=measure,
        sign=sign,
        paper=paper,
        only_with_curve=only_with_curve,
    )


VR_LM = "lower (ResFormer, 468M-parameter LM: Wiki perplexity 24.8 → {})"
NO_IMAGE_NUMBER = "none published ({}); expected higher"
# Every claim the page tests, in the order of its claims table; the first twelve were fixed before the first run.
CLAIMS = [
    claim(
        "cifar-neutreno",
        "CIFAR-10 accuracy, NeuTRENO − ViT",
        cifar("neutreno"),
        cifar("vit"),
        ACCURACY,
        +1,
        "+0.84 pp (ImageNet DeiT-tiny); +0.86 pp (CIFAR-10, kernel attention)",
    ),
    claim(
        "cifar-vit-minus",
        "CIFAR-10 accuracy, ViT⁻ − ViT",
        cifar("vit-"),
        cifar("vit"),
        ACCURACY,
        -1,
        '−0.16 pp (CIFAR-100; "comparable")',
    ),
    claim(
        "cifar-vit-plus",
        "CIFAR-10 accuracy, ViT⁺ − ViT",
        cifar("vit+"),
        cifar("vit"),
        ACCURACY,
        -1,
        "−2.44 pp (CIFAR-100)",
    ),
    claim(
        "cosine-trained",
        "last-layer token cosine similarity, NeuTRENO − ViT, trained",
        cifar("neutreno"),
        cifar("vit"),
        COSINE,
        -1,
        "lower (Fig. 1, ImageNet)",
    ),
    claim(
        "cosine-init",
        "last-layer token cosine similarity, NeuTRENO − ViT, random init",
        cifar("neutreno"),
        cifar("vit"),
        Measure("cosine", "init"),
        -1,
        "lower (Fig. 6, ImageNet)",
    ),
    claim(
        "data50-vit-minus",
        "accuracy with 50 % of the data, ViT⁻ − ViT",
        cifar("vit-", 0.5),
        cifar("vit", 0.5),
        ACCURACY,
        +1,
        "+0.20 pp (CIFAR-100)",
    ),
    claim(
        "data10-vit-minus",
        "accuracy with 10 % of the data, ViT⁻ − ViT",
        cifar("vit-", 0.1),
        cifar("vit", 0.1),
        ACCURACY,
        +1,
        "+1.52 pp (CIFAR-100)",
    ),
    claim(
        "corruption-vit-minus",
        "accuracy change from clean to corruption severity 5, ViT⁻ − ViT",
        cifar("vit-"),
        cifar("vit"),
        Measure("corruption_change"),
        +1,
        "+1.06 pp (CIFAR-100: ViT⁻ loses 26.55 pp, ViT 27.61)",
    ),
    *(
        claim(
            f"lm-{split}-{protocol}",
            f"WikiText {split} perplexity ({title}), NeuTRENO − softmax",
            LM.of(variant="neutreno"),
            LM.of(variant="softmax"),
            Measure("ppl", split=split, protocol=protocol),
            -1,
            "lower (WikiText-103)",
            protocol == "blocks",
        )
        for split in ("validation", "test")
        for protocol, title in (("sliding", "sliding window"), ("blocks", "blocks"))
    ),
    # Round 2, fixed before its units ran.
    claim(
        "cifar-neutreno-validated",
        "CIFAR-10 accuracy, NeuTRENO at the validated λ − ViT",
        VALIDATED.of(),
        cifar("vit"),
        ACCURACY,
        +1,
        "+0.84 pp (ImageNet DeiT-tiny, λ 0.6)",
    ),
    claim(
        "adapt-accuracy",
        "accuracy after adapting a trained ViT, NeuTRENO − continued softmax training",
        ADAPT.of(variant="neutreno"),
        ADAPT.of(variant="vit"),
        ACCURACY,
        +1,
        "+0.46 pp (ImageNet DeiT-tiny 72.17 → NeuTRENO adaptation 72.63, Table 1)",
    ),
    claim(
        "kernel-accuracy",
        "CIFAR-10 accuracy with linear attention, NeuTRENO − without the term",
        KERNEL.of(variant="neutreno"),
        KERNEL.of(variant="vit"),
        ACCURACY,
        +1,
        "+0.86 pp (CIFAR-10, 12 layers: 75.89 → 76.75, Table 8)",
    ),
    *(
        claim(
            f"valuepath-cifar-{m}",
            f"CIFAR-10 accuracy, {name} − ViT",
            value_path("cifar", m),
            cifar("vit"),
            ACCURACY,
            +1,
            paper,
        )
        for m, name, paper in (
            (
                "neutreno-learnable",
                "NeuTRENO with a learnable λ",
                NO_IMAGE_NUMBER.format("fixed λ: +0.84 pp on ImageNet"),
            ),
            ("value-residual", "value residual", NO_IMAGE_NUMBER.format("ResFormer reports language models")),
            (
                "value-residual-learnable",
                "learnable value residual",
                NO_IMAGE_NUMBER.format("ResFormer reports language models"),
            ),
            ("value-residual-gate", "gated value residual", NO_IMAGE_NUMBER.format("x-transformers' default mix")),
            (
                "twicing",
                "twicing attention",
                "higher (the twicing paper: DeiT-tiny on ImageNet, twicing in every layer)",
            ),
            ("xsa", "XSA", NO_IMAGE_NUMBER.format("the XSA paper reports language models")),
        )
    ),
    *(
        claim(
            f"valuepath-lm-{m}",
            f"WikiText test perplexity (blocks), {name} − softmax",
            value_path("lm", m),
            LM.of(variant="softmax"),
            Measure("ppl", split="test", protocol="blocks"),
            -1,
            paper,
        )
        for m, name, paper in (
            ("neutreno-learnable", "NeuTRENO with a learnable λ", "none published (fixed λ: lower, WikiText-103)"),
            ("value-residual", "value residual", VR_LM.format(23.8)),
            ("value-residual-learnable", "learnable value residual", VR_LM.format(23.7)),
            ("value-residual-gate", "gated value residual", "none published (x-transformers' default mix)"),
            ("twicing", "twicing attention", "lower (the twicing paper: WikiText-103, twicing in the last layers)"),
            ("xsa", "XSA", "lower (the XSA paper: FineWeb, 0.7-2.7B parameters, gains growing with the context)"),
            (
                "value-embedding",
                "value embeddings",
                "lower (modded-nanogpt's speedrun, 124M on FineWeb: record 14; no paper)",
            ),
        )
    ),
    *(
        claim(
            f"segment-{start}{suffix}",
            f"segmentation {title} mIoU from {words}, NeuTRENO − ViT",
            SEGMENT.of(variant=f"{prefix}neutreno"),
            SEGMENT.of(variant=f"{prefix}vit"),
            measure,
            +1,
            paper,
        )
        for start, prefix, words in (("pretrained", "", "the trained encoders"), ("scratch", "scratch-", "scratch"))
        for suffix, title, measure, paper in (
            (
                "",
                "single-scale",
                Measure("mean_iou"),
                "+1.52 points (ADE20K, Segmenter DeiT-tiny: 35.72 → 37.24, Table 2)",
            ),
            ("-ms", "multi-scale", Measure("mean_iou_ms"), "+1.38 points (ADE20K: 36.68 → 38.06, Table 2)"),
        )
    ),
    # Measurements with no claim to test (sign 0): the opening table's cost columns and the comparison tables.
    claim(
        "adapt-cosine",
        "last-layer token cosine after adaptation, NeuTRENO − continued training",
        ADAPT.of(variant="neutreno"),
        ADAPT.of(variant="vit"),
        COSINE,
        0,
        "not reported",
    ),
    *(
        claim(
            f"{kind}-{key}",
            f"last-layer {title}, {CIFAR_MODELS[key][1]} − ViT, trained",
            CIFAR_MODELS[key][0],
            cifar("vit"),
            Measure(kind, "trained"),
            0,
            "",
        )
        for kind, title in (("cosine", "token cosine similarity"), ("hfc", "‖HFC‖/‖LFC‖"))
        for key in CIFAR_MODELS
        if key not in ("vit", "vit+") and (kind, key) != ("cosine", "neutreno")
    ),  # that one is `cosine-trained`
]
