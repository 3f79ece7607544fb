"""Names and defaults that the library defines once and the command line shows, in a module that imports neither torch
nor transformers (nor anything of the package but the preset tables, which import nothing), so that `hf-neutreno
--help` and each subcommand's `--help` stay fast; with them, `check_metrics`,
so that `hf-neutreno diagnose` reports a bad metric at once. The modules that use them
(`hf_neutreno.engine.model_factories`, `.tasks`, `.preset_tasks`, `hf_neutreno.data.loading`, `.lm_eval`,
`hf_neutreno.diagnostics`) import them from here and export them too. The other torch-free homes of such names: the
variants, `hf_neutreno.engine.variants`; the default coefficients, `hf_neutreno.models.value_path_defaults`;
`compare`'s settings, `hf_neutreno.engine.compare.settings`.
"""

from .models import presets as _PRESETS  # imports nothing: `hf_neutreno.models` registers nothing

IMAGE_PRESETS = sorted(_PRESETS.EIGEN_VIT_PRESETS)  # the NeuTRENO ViT's presets and the poster's ViT-Ti
# A NeuTRENO ViT preset with a decoder is a Segmenter.
SEGMENTATION_PRESETS = sorted(
    name for name, fields in _PRESETS.NEUTRENO_VIT_PRESETS.items() if "decoder_type" in fields
)
LANGUAGE_MODEL_PRESETS = sorted(_PRESETS.NEUTRENO_GPT_PRESETS)
# The presets `hf-neutreno compare` trains from scratch.
SEGMENTATION_MODELS = SEGMENTATION_PRESETS
IMAGE_MODELS = sorted(set(_PRESETS.NEUTRENO_VIT_PRESETS) - set(SEGMENTATION_MODELS))  # classifiers
TEXT_MODELS = LANGUAGE_MODEL_PRESETS

ANNOTATION_COLUMN = "annotation"  # scene_parse_150's label maps, an Image column beside the images

# The tasks of `hf-neutreno compare` (`hf_neutreno.engine.tasks.TASKS`): name -> the Auto
# class of the model with its head, the Auto class of its tokenizer or image processor, the score.
TASK_SPECS = {
    "image-classification": ("AutoModelForImageClassification", "AutoImageProcessor", "accuracy"),
    "text-classification": ("AutoModelForSequenceClassification", "AutoTokenizer", "accuracy"),
    "causal-lm": ("AutoModelForCausalLM", "AutoTokenizer", "perplexity"),
    "masked-lm": ("AutoModelForMaskedLM", "AutoTokenizer", "perplexity"),
    "semantic-segmentation": ("AutoModelForSemanticSegmentation", "AutoImageProcessor", "mean_iou"),
}

BUILTIN_DIGITS = "digits"  # scikit-learn's bundled 8×8 digits (`hf_neutreno.data.loading.load_dataset_splits`)

PROTOCOLS = ("sliding", "blocks")  # the perplexity protocols of `hf_neutreno.data.lm_eval`

# The over-smoothing metrics (`hf_neutreno.diagnostics.metrics`).
HIDDEN_STATE_METRICS = ("cosine_similarity", "hfc_lfc_ratio", "rank_one_distance", "effective_rank")
ATTENTION_METRICS = ("attention_map_similarity", "functional_j", "gradient_alignment")
METRICS = HIDDEN_STATE_METRICS + ATTENTION_METRICS
# What `metrics=None` measures: every metric but the effective rank, whose eigendecompositions cost about as much as
# the forward pass on CPU (docs/benchmarks.md); ask for it by name.
DEFAULT_METRICS = tuple(m for m in METRICS if m != "effective_rank")


def check_metrics(metrics) -> tuple[str, ...]:
    """Validate a metric selection (None: `DEFAULT_METRICS`) and return it in canonical order."""
    if metrics is None:
        return DEFAULT_METRICS
    if isinstance(metrics, str):
        metrics = [metrics]
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"Unknown metric(s) {unknown}; `metrics` must be chosen from {list(METRICS)}.")
    if not metrics:
        raise ValueError(f"`metrics` is empty; choose from {list(METRICS)} (or pass None for the default set).")
    return tuple(m for m in METRICS if m in metrics)
