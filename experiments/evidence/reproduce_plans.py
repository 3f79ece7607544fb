"""The reproductions as typed plans: each kind of unit (one trained model) is a `Plan` that knows its units' names,
the registry variant it trains, what it needs before it can start, how to build its model for
`hf_neutreno.engine.experiment.run_paired` and how to train and score it. `PLANS` is the one table of them; `schedule`
puts their units in the order the claims need them.

A unit's name (its JSON file's stem in `<out>/units/`, and its checkpoint folder's) is its plan's series and seed:
`cifar-vit--100pct-seed0`; the names of finished units name committed results, so they never change. Code asks a plan
for a series (`CIFAR.of(variant="vit-", fraction=1.0)`) instead of spelling it.
"""

import dataclasses
import json
from pathlib import Path

from hf_neutreno.engine.experiment import Run
from hf_neutreno.value_path import DEFAULT_COEFFICIENTS

from .reproduce_budget import Budget
from .reproduce_cifar import VIT_LAMBDA, run_cifar, vit_builder
from .reproduce_lm import LM_LAMBDAS, lm_builder, run_lm
from .reproduce_segment import run_segment
from .reproduce_training import Context

# The CIFAR units' labels, which name the committed results (`cifar-vit-seed0`, ...), and the registry variant
# (`hf_neutreno.engine.variants`) each one trains.
UNIT_VARIANTS = {"vit": "softmax", "neutreno": "neutreno", "vit-": "vit-minus", "vit+": "vit-plus"}
EFFICIENCY_VARIANTS = ("vit", "vit-")  # ViT vs ViT⁻ for the poster's Tables 2-3
FRACTIONS = (1.0, 0.5, 0.1)
# Round 2, "which remedy, and when" (the units after the first run's): NeuTRENO's λ chosen on a validation split held
# out of the training images, kernel attention (NeuTRENO Table 8), NeuTRENO adaptation of trained ViTs (Table 1).
LAMBDA_GRID = (0.1, 0.2, 0.4, 0.6)
SWEEP_SEEDS = (0,)
KERNEL_VARIANTS = ("vit", "neutreno")  # both with linear (elu + 1) attention
ADAPTATION_VARIANTS = ("vit", "neutreno")  # continued softmax training / NeuTRENO adaptation
ADAPTATION_EPOCHS = 1 / 3  # of the training epochs, as the paper's NeuTRENO adaptation of DeiT
# The value-path family (`hf_neutreno.apply_value_path` on the softmax ViT and LM, against the first run's ViT and
# softmax LM of the same seeds): the value residual (α = 1/2 fixed, learnable per layer as modded-nanogpt's, or gated
# per token and head as x-transformers'), NeuTRENO's λ learnable per layer (from each task's official λ) and twicing
# (c = 1) where its authors put it: every ViT layer, the LM's last two of 16 (their LM's layers 14 and 15).
VALUE_PATH_METHODS = ("value-residual", "value-residual-learnable", "neutreno-learnable")
VALUE_PATH_METHODS += ("value-residual-gate", "twicing")  # added after the first three had run
VALUE_PATH_METHODS += ("xsa",)  # exclusive self-attention (s = 1, every layer), added after those
# Value embeddings (g = 1, nanochat's layers: every other one, ending with the last) look a table up by token id: the
# language model only.
VALUE_PATH_METHODS += ("value-embedding",)
VALUE_PATH_TASKS = {"value-embedding": ("lm",)}  # the tasks of a method that does not take both
VALUE_PATH_COEFFICIENTS = {  # apply_value_path's α and c, each task's official λ
    "cifar": {**DEFAULT_COEFFICIENTS, "neutreno": VIT_LAMBDA},
    "lm": {**DEFAULT_COEFFICIENTS, "neutreno": LM_LAMBDAS["neutreno"]},
}
VALUE_PATH_LM_LAST_LAYERS = {"twicing": 2}  # the methods the LM gets in its last layers only, and how many
# Segmenter from trained encoders (NeuTRENO Table 2's protocol at this scale): the kept CIFAR-10 ViT and NeuTRENO ViT
# of each seed (32-pixel patch-4 position grid resampled to fashion-scenes' 64 pixels) with a new 2-block mask
# transformer, fine-tuned on fashion-scenes (λ 0.6 in encoder and decoder for NeuTRENO, as the paper), against the
# same Segmenter from random weights. The optimiser, which Segmenter's own recipe (SGD, lr 1e-3, 160k iterations)
# does not settle at 2,000 steps, is chosen by a pilot on held-out training scenes, never on the validation scenes
# the page reports: the candidates below, from the trained ViT of seed 0, the best single-scale mIoU on 500 of the
# 4,000 training scenes after training on the other 3,500 (a tie goes to the earlier candidate).
SEGMENT_RECIPES = {
    "sgd": dict(optim="sgd", optim_args="momentum=0.9", learning_rate=1e-3, weight_decay=0.0, warmup_steps=0),
    "adamw-1e-4": dict(optim="adamw_torch", learning_rate=1e-4, weight_decay=0.01, warmup_steps=100),
    "adamw-1e-3": dict(optim="adamw_torch", learning_rate=1e-3, weight_decay=0.01, warmup_steps=100),
}
SEGMENT_VARIANTS = ("vit", "neutreno", "scratch-vit", "scratch-neutreno")
ROUND2_EXPERIMENTS = ("lambda", "adaptation", "kernel", "value-path", "segmentation")


@dataclasses.dataclass(frozen=True)
class Unit:
    """One model to train: its plan's `kind`, its seed and its plan's coordinates (`variant`: the unit's label, a
    registry variant or a CIFAR label such as `vit-`). Written into its JSON as the "unit" field, as it always was."""

    kind: str
    seed: int
    variant: str | None = None
    task: str | None = None  # a value-path unit's task: "cifar" or "lm"
    fraction: float | None = None  # of the training images
    neutreno_lambda: float | None = None
    recipe: str | None = None  # a Segmenter pilot's optimiser

    @classmethod
    def from_json(cls, record: dict) -> "Unit":
        return cls(**record)

    def to_json(self) -> dict:
        order = ("kind", "task", "variant", "fraction", "neutreno_lambda", "recipe", "seed")
        return {k: getattr(self, k) for k in order if getattr(self, k) is not None}

    @property
    def plan(self) -> "Plan":
        return PLANS[self.kind]

    @property
    def series(self) -> str:
        """The name without the seed: what the page's tables and claims compare."""
        return self.plan.series(self)

    @property
    def name(self) -> str:
        return f"{self.series}-seed{self.seed}"

    @property
    def run(self) -> Run:
        """The engine's run: the registry variant this unit trains, its seed and its coordinates."""
        coordinates = tuple((k, v) for k, v in self.to_json().items() if k not in ("kind", "seed"))
        return Run(self.plan.variant(self), self.seed, (("kind", self.kind), *coordinates))


def parent_dir(out: Path, variant: str, seed: int) -> Path:
    """Where a trained parent ViT (round 2) is kept: weights, config, code and image processor."""
    return out / "models" / f"cifar-{variant}-seed{seed}"


def recorded(out: Path, unit: Unit) -> Path | None:
    """The unit's JSON, if it has finished (under any budget)."""
    path = out / "units" / f"{unit.name}.json"
    return path if path.exists() else None


def _selection_scores(out: Path, units: dict, metric: str) -> dict | None:
    """{candidate: `metric` of its unit}, once every such unit has finished; None until then."""
    paths = {candidate: recorded(out, unit) for candidate, unit in units.items()}
    if not all(paths.values()):
        return None
    return {candidate: json.loads(path.read_text())[metric] for candidate, path in paths.items()}


def validated_lambda(out: Path) -> float | None:
    """The λ of the sweep with the best validation accuracy (a tie goes to the official 0.6, then to the larger λ),
    once every sweep unit has finished; None until then. Fixed before the first sweep unit ran."""
    units = {lam: Unit("sweep", SWEEP_SEEDS[0], neutreno_lambda=lam) for lam in LAMBDA_GRID}
    accuracy = _selection_scores(out, units, "accuracy")
    if accuracy is None:
        return None
    return max(LAMBDA_GRID, key=lambda lam: (accuracy[lam], lam == VIT_LAMBDA, lam))


def segment_recipe(out: Path) -> str | None:
    """The pilot's optimiser for the Segmenter units (best held-out mIoU; a tie goes to the earlier candidate), once
    every pilot unit has finished; None until then."""
    units = {recipe: Unit("segpilot", SWEEP_SEEDS[0], recipe=recipe) for recipe in SEGMENT_RECIPES}
    scores = _selection_scores(out, units, "mean_iou")
    if scores is None:
        return None
    return max(SEGMENT_RECIPES, key=lambda recipe: (scores[recipe], -list(SEGMENT_RECIPES).index(recipe)))


class Plan:
    """One kind of unit. `series` names a unit without its seed, `variant` is the registry variant it trains,
    `ready` whether what it starts from exists, `builder` the `build(variant)` that `run_paired` pairs (None: the
    unit's script builds and pairs its own model by seed), `train` trains and scores the built model into the
    unit's result (`records`: the measures every result has)."""

    kind = ""
    records: tuple = ()

    def series(self, unit: Unit) -> str:
        raise NotImplementedError

    def of(self, **coordinates) -> str:
        """The series of this plan's units with these coordinates (`*` where a coordinate is None and matches any)."""
        return self.series(Unit(self.kind, seed=0, **coordinates))

    def variant(self, unit: Unit) -> str:
        return UNIT_VARIANTS[unit.variant]

    def ready(self, unit: Unit, out: Path) -> bool:
        return True

    def builder(self, unit: Unit, context: Context):
        return vit_builder(context)

    def train(self, unit: Unit, model, context: Context) -> dict:
        raise NotImplementedError


class Cifar(Plan):
    """The first run's ViTs: every variant on all the data (curves, over-smoothing, eigenvalues; ViT and ViT⁻ also
    the corruptions), ViT and ViT⁻ on fractions of it."""

    kind, records = "cifar", ("accuracy",)

    def series(self, unit):
        return f"cifar-{unit.variant}-{round(unit.fraction * 100)}pct"

    def train(self, unit, model, context):
        # Paired: ViT⁻ runs these seeds (not the main claim's extra ones).
        robust = unit.variant in EFFICIENCY_VARIANTS and unit.seed in context.budget.seeds
        return run_cifar(model, context, unit.seed, fraction=unit.fraction, robustness=robust)


class Sweep(Plan):
    """NeuTRENO at each λ of the grid, trained and scored on the held-out split of the training images."""

    kind, records = "sweep", ("accuracy",)

    def series(self, unit):
        return f"sweep-neutreno-lambda{unit.neutreno_lambda:g}"

    def variant(self, unit):
        return "neutreno"

    def builder(self, unit, context):
        return vit_builder(context, neutreno_lambda=unit.neutreno_lambda)

    def train(self, unit, model, context):
        return run_cifar(model, context, unit.seed, validation=True)


class Validated(Sweep):
    """NeuTRENO at the λ the sweep chose, on all the data (only when it is not the official 0.6)."""

    kind = "validated"

    def series(self, unit):
        lam = "*" if unit.neutreno_lambda is None else f"{unit.neutreno_lambda:g}"
        return f"cifar-neutreno-lambda{lam}-100pct"

    def train(self, unit, model, context):
        return run_cifar(model, context, unit.seed)


class Kernel(Plan):
    """ViT and NeuTRENO ViT with linear (elu + 1) attention."""

    kind, records = "kernel", ("accuracy",)

    def series(self, unit):
        return f"kernel-{unit.variant}"

    def builder(self, unit, context):
        return vit_builder(context, kernel="linear")

    def train(self, unit, model, context):
        return run_cifar(model, context, unit.seed)


class Parent(Kernel):
    """A ViT retrained and kept: what adaptation and the Segmenters start from."""

    kind = "parent"

    def series(self, unit):
        return f"parent-{unit.variant}"

    def builder(self, unit, context):
        return vit_builder(context)

    def train(self, unit, model, context):
        return run_cifar(model, context, unit.seed, keep=parent_dir(context.out, unit.variant, unit.seed))


class Adapt(Kernel):
    """The kept ViT trained on for a third of the epochs: as it is, or as NeuTRENO at the validated λ."""

    kind = "adapt"

    def series(self, unit):
        return f"adapt-{unit.variant}"

    def ready(self, unit, out):
        return recorded(out, Unit("parent", unit.seed, "vit")) is not None and validated_lambda(out) is not None

    def builder(self, unit, context):
        lam = validated_lambda(context.out)
        if lam is None:
            raise FileNotFoundError(f"{unit.name} uses the λ the sweep chooses; the sweep has not finished.")
        return vit_builder(context, neutreno_lambda=lam)

    def train(self, unit, model, context):
        parent = parent_dir(context.out, "vit", unit.seed)
        if not (parent / "model.safetensors").is_file():
            raise FileNotFoundError(f"{unit.name} starts from the trained ViT {parent}, which is not there yet.")
        epochs = context.budget.epochs * ADAPTATION_EPOCHS
        return run_cifar(model, context, unit.seed, start_from=parent, epochs=epochs)


class ValuePath(Plan):
    """A value path of the registry on the first run's softmax ViT or LM, at its task's coefficient."""

    kind, records = "valuepath", ()

    def series(self, unit):
        return f"valuepath-{unit.task}-{unit.variant}"

    def variant(self, unit):
        return unit.variant

    def builder(self, unit, context):
        coefficients = VALUE_PATH_COEFFICIENTS[unit.task]
        if unit.task == "lm":
            return lm_builder(context, coefficients=coefficients, last_layers=VALUE_PATH_LM_LAST_LAYERS)
        return vit_builder(context, coefficients=coefficients)

    def train(self, unit, model, context):
        return (run_lm if unit.task == "lm" else run_cifar)(model, context, unit.seed)


class Lm(ValuePath):
    """The WikiText-2 language models: softmax and NeuTRENO at the official λ."""

    kind, records = "lm", ("validation", "test")

    def series(self, unit):
        return f"lm-{unit.variant}"

    def builder(self, unit, context):
        return lm_builder(context)

    def train(self, unit, model, context):
        return run_lm(model, context, unit.seed)


class SegmentPilot(Plan):
    """Segmenter from the kept ViT of seed 0 with one candidate optimiser, scored on held-out training scenes."""

    kind, records = "segpilot", ("mean_iou",)

    def series(self, unit):
        return f"segpilot-{unit.recipe}"

    def variant(self, unit):
        return "softmax"

    def ready(self, unit, out):
        return recorded(out, Unit("parent", unit.seed, "vit")) is not None

    def builder(self, unit, context):
        return None  # the segmentation script builds the Segmenter, from the kept encoder or the seed

    def train(self, unit, model, context):
        encoder = parent_dir(context.out, "vit", unit.seed)
        return run_segment(context, unit.seed, "vit", SEGMENT_RECIPES[unit.recipe], encoder, pilot=True)


class Segment(SegmentPilot):
    """Segmenter with the pilot's optimiser, from the kept ViT / NeuTRENO ViT or from random weights."""

    kind, records = "segment", ("mean_iou", "mean_iou_ms", "pixel_accuracy")

    def series(self, unit):
        return f"segment-{unit.variant}"

    def variant(self, unit):
        return UNIT_VARIANTS[unit.variant.removeprefix("scratch-")]

    def ready(self, unit, out):
        encoder = unit.variant.removeprefix("scratch-")
        kept = unit.variant.startswith("scratch-") or recorded(out, Unit("parent", unit.seed, encoder)) is not None
        return segment_recipe(out) is not None and kept

    def train(self, unit, model, context):
        recipe = segment_recipe(context.out)
        if recipe is None:
            raise FileNotFoundError(f"{unit.name} uses the optimiser the pilot chooses; it has not finished.")
        encoder = unit.variant.removeprefix("scratch-")
        folder = None if unit.variant.startswith("scratch-") else parent_dir(context.out, encoder, unit.seed)
        return run_segment(context, unit.seed, unit.variant, SEGMENT_RECIPES[recipe], folder) | {"recipe": recipe}


CIFAR, SWEEP, VALIDATED, KERNEL, PARENT, ADAPT = Cifar(), Sweep(), Validated(), Kernel(), Parent(), Adapt()
LM, VALUE_PATH, SEGMENT_PILOT, SEGMENT = Lm(), ValuePath(), SegmentPilot(), Segment()
PLANS = {p.kind: p for p in (CIFAR, SWEEP, VALIDATED, KERNEL, PARENT, ADAPT, LM, VALUE_PATH, SEGMENT_PILOT, SEGMENT)}


def schedule(budget: Budget, experiments: list[str], out: Path | None = None) -> list[Unit]:
    """Every model to train, in the order the claims need them: ViT and NeuTRENO on all the data (the main claim),
    the language models, ViT⁻ and ViT⁺, the data fractions, then the main claim's extra seeds; then round 2: the λ
    sweep on the validation split, the trained ViTs that adaptation starts from and the adaptation itself, the
    validated λ on all seeds (once the sweep has chosen one other than 0.6), kernel attention, the value paths, and
    the trained NeuTRENO ViTs that Segmenter starts from, the pilot and the Segmenters. A run stopped early has then
    answered the most questions it could."""
    seeds, units = budget.seeds, []

    def each(kind, labels, seeds, **coordinates):
        return [Unit(kind, s, variant=v, **coordinates) for s in seeds for v in labels]

    if "cifar" in experiments:
        units += each("cifar", ("vit", "neutreno"), seeds, fraction=1.0)
    if "lm" in experiments:
        units += each("lm", LM_LAMBDAS, seeds)
    if "cifar" in experiments:
        units += each("cifar", ("vit-", "vit+"), seeds, fraction=1.0)
        for fraction in FRACTIONS[1:]:
            units += each("cifar", EFFICIENCY_VARIANTS, seeds, fraction=fraction)
        extra = [s for s in budget.main_claim_seeds or () if s not in seeds]
        units += each("cifar", ("vit", "neutreno"), extra, fraction=1.0)
    if "lambda" in experiments:
        units += [Unit("sweep", s, neutreno_lambda=lam) for s in SWEEP_SEEDS for lam in LAMBDA_GRID]
    if "adaptation" in experiments:
        units += each("parent", ("vit",), seeds) + each("adapt", ADAPTATION_VARIANTS, seeds)
    chosen = validated_lambda(out) if out is not None else None
    if "lambda" in experiments and chosen is not None and chosen != VIT_LAMBDA:
        units += [Unit("validated", s, neutreno_lambda=chosen) for s in budget.main_claim_seeds or seeds]
    if "kernel" in experiments:
        units += each("kernel", KERNEL_VARIANTS, seeds)
    if "value-path" in experiments:  # the fixed value residual first, NeuTRENO's learnable λ last
        for method in VALUE_PATH_METHODS:
            tasks = VALUE_PATH_TASKS.get(method, ("cifar", "lm"))
            units += [Unit("valuepath", s, method, task) for task in tasks for s in seeds]
    if "adaptation" in experiments or "segmentation" in experiments:  # Segmenter's NeuTRENO encoders
        units += each("parent", ("neutreno",), seeds)
    if "segmentation" in experiments:
        units += [Unit("segpilot", SWEEP_SEEDS[0], recipe=recipe) for recipe in SEGMENT_RECIPES]
        units += each("segment", SEGMENT_VARIANTS, seeds)
    return units
