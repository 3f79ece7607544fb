"""`measure_oversmoothing`: the over-smoothing metrics of any transformers model, per layer, over a stream of batches.

Layer numbering (every metric, every report): hidden state 0 is the embedding output and hidden state ℓ the output
of block ℓ, as `output_hidden_states=True` returns them. Attention metrics of block ℓ are reported at ℓ (1..L), the
similarity of the maps of blocks ℓ−1 and ℓ at ℓ (2..L).

Segmentation models whose output also carries the decoder's hidden states (`decoder_hidden_states` of a
`SemanticSegmenterOutput`, as `NeuTRENOViTForSemanticSegmentation`'s mask transformer returns them): the decoder's
blocks continue the numbering, decoder block j at L + j, and `report.metadata["decoder_layers"]` lists those layers.
The decoder's input (the projected encoder output and the class embeddings) is not measured, and no attention-map
similarity is reported between the last encoder block and the first decoder block (different tokens).
"""

import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager

import torch
from tqdm.auto import tqdm
from transformers.modeling_outputs import SemanticSegmenterOutput

from ..names import ATTENTION_METRICS, HIDDEN_STATE_METRICS, METRICS, check_metrics
from .metrics import (
    attention_map_similarity,
    functional_j,
    gradient_alignment,
    hidden_state_metrics,
)
from .probe import AttentionCall, ProbeUnavailable, attention_probe
from .report import OversmoothingReport


class _RunningMean:
    """Per metric and layer: the sum of the per-sample values and the number of samples where it is defined."""

    def __init__(self, device: torch.device):
        self.dtype = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64
        self.device = device
        self.sums: dict[str, dict[int, torch.Tensor]] = {}
        self.counts: dict[str, dict[int, torch.Tensor]] = {}

    def add(self, metric: str, layer: int, values: torch.Tensor) -> None:
        defined = torch.isfinite(values)
        total = torch.where(defined, values, torch.zeros_like(values)).sum().to(self.dtype)
        sums, counts = self.sums.setdefault(metric, {}), self.counts.setdefault(metric, {})
        if layer not in sums:
            sums[layer] = torch.zeros((), dtype=self.dtype, device=values.device)
            counts[layer] = torch.zeros((), dtype=torch.long, device=values.device)
        sums[layer] += total
        counts[layer] += defined.sum()

    def result(self) -> tuple[dict[str, list[int]], dict[str, list[float]], dict[str, list[int]]]:
        layers, values, counts = {}, {}, {}
        for metric in METRICS:
            if metric not in self.sums:
                continue
            order = sorted(self.sums[metric])
            layers[metric] = order
            counts[metric] = [int(self.counts[metric][layer]) for layer in order]
            values[metric] = [
                float(self.sums[metric][layer]) / count if count else float("nan")
                for layer, count in zip(order, counts[metric])
            ]
        return layers, values, counts


class _AttentionObserver:
    """Computes the attention metrics of each attention call of one forward pass; commits them if the calls match
    the blocks one to one."""

    def __init__(self, metrics: Sequence[str]):
        self.metrics = metrics
        self.error: str | None = None
        self.start_batch(None)

    def start_batch(self, token_mask: torch.Tensor | None) -> None:
        self.token_mask = token_mask
        self.calls = 0
        self.previous: torch.Tensor | None = None
        self.pending: list[tuple[str, int, torch.Tensor]] = []

    def __call__(self, call: AttentionCall) -> None:
        self.calls += 1
        layer = self.calls
        if self.error is not None:  # already unusable: skip the work
            return
        if not call.is_self_attention:
            self.error = f"block {layer} is not self-attention over the input tokens (cross-attention or a cache)"
            return
        query_mask = self.token_mask
        if query_mask is not None and query_mask.shape[-1] != call.query.shape[-2]:
            query_mask = None  # the hidden-state check reports a length mismatch
        try:
            scores = call.scores()
        except ProbeUnavailable as error:
            self.error = f"block {layer}: {error}"
            return
        probs = call.probabilities(scores)
        if "functional_j" in self.metrics:
            self.pending.append(("functional_j", layer, functional_j(probs, call.value, query_mask)))
        if "gradient_alignment" in self.metrics:
            values = gradient_alignment(
                call.query,
                call.key,
                call.value,
                call.attention_mask,
                call.scaling,
                call.is_causal,
                query_mask,
                scores=scores,
                softcap=call.softcap,
            )
            self.pending.append(("gradient_alignment", layer, values))
        if "attention_map_similarity" in self.metrics:
            if self.previous is not None and self.previous.shape[-1] == probs.shape[-1]:
                values = attention_map_similarity(self.previous, probs, query_mask)
                self.pending.append(("attention_map_similarity", layer, values))
            self.previous = probs

    def end_batch(self, num_blocks: int, accumulate, keep: set[int], first_decoder_layer: int | None = None) -> None:
        if self.error is None and self.calls != num_blocks:
            self.error = (
                f"the model made {self.calls} attention-interface calls for {num_blocks} blocks, so calls cannot be "
                "matched to layers"
                if self.calls
                else "the model never called transformers' attention interface (e.g. linear attention or attention "
                "written without `ALL_ATTENTION_FUNCTIONS`)"
            )
        if self.error is None:
            for metric, layer, values in self.pending:
                if metric == "attention_map_similarity" and layer == first_decoder_layer:
                    continue  # the encoder's last map and the decoder's first are over different tokens
                if layer in keep:
                    accumulate(metric, layer, values)
        self.pending = []
        self.previous = None


def _hidden_states(model: torch.nn.Module, inputs: Mapping) -> tuple[tuple, int | None]:
    """The hidden states to measure, and the index of the first decoder block's output (None without a decoder)."""
    name = type(model).__name__
    try:
        outputs = model(**inputs, output_hidden_states=True, return_dict=True)
    except TypeError as error:
        if "output_hidden_states" in str(error) or "return_dict" in str(error):
            raise ValueError(
                f"{name} cannot return hidden states (its forward does not take `output_hidden_states`): {error}"
            ) from None
        raise
    hidden_states = getattr(outputs, "hidden_states", None)
    if hidden_states is None and isinstance(outputs, Mapping):
        hidden_states = outputs.get("hidden_states")
    if not hidden_states:
        hint = (
            " It is an encoder-decoder model: measure its encoder (`model.get_encoder()`)."
            if getattr(outputs, "encoder_hidden_states", None) is not None
            else ""
        )
        raise ValueError(
            f"{name} returned no `hidden_states` with `output_hidden_states=True`; over-smoothing is measured on "
            f"the hidden states of a transformers model.{hint}"
        )
    not_tokens = next((hidden for hidden in hidden_states if hidden.ndim != 3), None)
    if not_tokens is not None:
        raise ValueError(
            f"{name} returns hidden states of shape {tuple(not_tokens.shape)}, not (batch, tokens, hidden): "
            "over-smoothing is measured between the tokens of a transformer's hidden states, and a feature map "
            "(batch, channels, height, width) of a convolutional network has no tokens. measure_oversmoothing "
            "measures transformer models (ViT, DeiT, BERT, GPT-2, Llama, ...)."
        )
    decoder_hidden_states = getattr(outputs, "decoder_hidden_states", None)
    if isinstance(outputs, SemanticSegmenterOutput) and decoder_hidden_states:
        # Entry 0 is the decoder's input; its blocks' outputs continue the encoder's numbering.
        return tuple(hidden_states) + tuple(decoder_hidden_states[1:]), len(hidden_states)
    return tuple(hidden_states), None


def _token_mask(inputs: Mapping, hidden: torch.Tensor) -> torch.Tensor | None:
    mask = inputs.get("attention_mask")
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor) or mask.ndim != 2 or tuple(mask.shape) != tuple(hidden.shape[:2]):
        shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(
            f"`attention_mask` must be (batch, tokens) = {tuple(hidden.shape[:2])} like the hidden states, got "
            f"{shape}; padding could not be excluded."
        )
    return mask


def _unavailable(names: Sequence[str], model: torch.nn.Module, reason: str) -> str:
    return f"Attention metrics {list(names)} are not available for {type(model).__name__}: {reason}."


def _resolve_layers(layers: Sequence[int] | None, num_hidden_states: int) -> list[int]:
    if layers is None:
        return list(range(num_hidden_states))
    resolved = set()
    for layer in layers:
        index = layer + num_hidden_states if layer < 0 else layer
        if not 0 <= index < num_hidden_states:
            raise ValueError(
                f"`layers` contains {layer}, but the model has hidden states 0..{num_hidden_states - 1} "
                "(0 is the embedding output; negative indices count from the end)."
            )
        resolved.add(index)
    return sorted(resolved)


def _model_inputs(batch, device: torch.device) -> dict:
    if not isinstance(batch, Mapping):
        raise ValueError(f"Each batch must be a dict of tensors (model keyword arguments), got {type(batch).__name__}.")
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


@contextmanager
def _measuring(model: torch.nn.Module, observer: "_AttentionObserver | None") -> Iterator[None]:
    """Eval mode, no gradients and, for attention metrics, the attention probe; all as they were afterwards, the
    random state too (a DataLoader draws a seed from it for each pass), so that measuring during training leaves the
    training's dropout masks and batches as they would be without it. A model whose attention cannot be probed leaves
    the reason in `observer.error`."""
    was_training = model.training
    device = next(iter(model.parameters()), torch.empty(0)).device
    with ExitStack() as stack:
        stack.enter_context(
            torch.random.fork_rng(devices=[] if device.type == "cpu" else [device], device_type=device.type)
        )
        if observer is not None:
            try:
                stack.enter_context(attention_probe(model, observer))
            except ProbeUnavailable as error:
                observer.error = str(error)
        model.eval()
        stack.callback(model.train, was_training)
        stack.enter_context(torch.no_grad())
        yield


def measure_oversmoothing(
    model: torch.nn.Module,
    batches: Iterable[Mapping[str, torch.Tensor]],
    metrics: Sequence[str] | None = None,
    layers: Sequence[int] | None = None,
    *,
    progress: bool = True,
    model_name: str | None = None,
) -> OversmoothingReport:
    r"""Measure over-smoothing per layer, averaged over every sample of `batches`.

    Args:
        model: a transformers model whose hidden states are token sequences, (batch, tokens, hidden), returned when
            it is called with `output_hidden_states=True`: ViT, DeiT, BERT-family, GPT-2, Llama-family, this
            package's models, and models adapted with `hf_neutreno.apply_value_path` (measured with their value
            path). Convolutional networks (ResNet, ConvNeXt) return feature maps (batch, channels, height, width),
            which have no tokens to compare, and raise `ValueError`. The model runs in eval mode under
            `torch.no_grad()`; its training mode and attention implementation are restored afterwards.
        batches: a DataLoader or any iterable of dicts of tensors that the model takes as keyword arguments
            (`pixel_values`; `input_ids`, `attention_mask`, ...). Tensors are moved to the model's device. A 2-D
            `attention_mask` marks padding, which every metric leaves out. Pad on the right: a model with absolute
            positions (GPT-2, BERT) that is not handed `position_ids` numbers left-padded tokens from the first
            pad, so its real tokens' states, and every metric, change with the amount of padding (and with the
            batch size); right padding leaves the real tokens' states as they are without padding, for causal and
            bidirectional models alike. `hf-neutreno diagnose` pads on the right.
        metrics: names from `METRICS` (default: `DEFAULT_METRICS`, all but `effective_rank`). Hidden-state metrics,
            on every hidden state:
            `cosine_similarity` (mean pairwise token cosine, NeuTRENO App. E.3), `hfc_lfc_ratio` (‖HFC‖_F/‖LFC‖_F,
            Dovonon et al.), `rank_one_distance` (‖X − 1x̄ᵀ‖_F/‖X‖_F), `effective_rank` (exp of the entropy of the
            normalised singular values). Attention metrics, on every block whose attention goes through transformers'
            attention interface: `attention_map_similarity` (cosine of successive layers' maps, Fig. 5),
            `functional_j` (J(u), Fig. 3) and `gradient_alignment` (symmetric vs asymmetric ∇J estimates, Table 4).
            `hf_neutreno.diagnostics.metrics` defines each one exactly (per head or merged, masks, causal models).
            With the default, attention metrics a model cannot provide are dropped with a warning; asked for by
            name, they raise.
        layers: hidden-state indices to measure (0 = embedding output, negative indices count from the end);
            default: all. Attention metrics follow the same numbering (block ℓ at ℓ).
        progress: show a tqdm progress bar.
        model_name: stored in the report (default: `model.config.name_or_path` or the class name).

    The hidden states are those the model returns: ViT/DeiT and this package's ViT return the last block's output;
    models that tie the last entry to their output (GPT-2, Llama) return it after the final norm.

    Every value is the mean over samples of a per-sample value (the papers average over 1000 samples). Memory does not
    grow with the number of samples: only running sums are kept. The result depends only on the model and the data.

    Cost (DeiT-tiny, 1000 CIFAR-10 images, CPU; docs/benchmarks.md): `output_hidden_states` and the default
    hidden-state metrics take 1.07× of plain inference; `effective_rank` needs one float64 eigendecomposition per
    sample and hidden state, about +1× on CPU, which is why it is measured only when asked for by name; the attention
    metrics recompute every attention map twice (about +1.3×). Choose `metrics` when that matters.
    """
    measurement = _Measurement(model, check_metrics(metrics), layers, strict=metrics is not None)
    with _measuring(model, measurement.observer):
        measurement.check_attention()  # before measuring anything
        total = len(batches) if hasattr(batches, "__len__") else None
        for batch in tqdm(batches, total=total, desc="over-smoothing", unit="batch", disable=not progress):
            measurement.add(batch)
    return measurement.report(model_name)


class _Measurement:
    """The running sums of one `measure_oversmoothing` call. `strict`: attention metrics were asked for by name, so
    a model that cannot provide them raises instead of warning."""

    def __init__(self, model: torch.nn.Module, names: list[str], layers: Sequence[int] | None, strict: bool):
        self.model, self.layers, self.strict = model, layers, strict
        self.hidden_names = [m for m in names if m in HIDDEN_STATE_METRICS]
        self.attention_names = [m for m in names if m in ATTENTION_METRICS]
        parameter = next(model.parameters(), None)
        self.device = parameter.device if parameter is not None else torch.device("cpu")
        self.observer = _AttentionObserver(self.attention_names) if self.attention_names else None
        self.accumulator = _RunningMean(self.device)
        self.num_samples, self.num_hidden_states, self.selected, self.first_decoder_layer = 0, 0, None, None

    def check_attention(self) -> None:
        if self.observer is not None and self.observer.error is not None and self.strict:
            raise ValueError(_unavailable(self.attention_names, self.model, self.observer.error))

    def add(self, batch: Mapping[str, torch.Tensor]) -> None:
        inputs = _model_inputs(batch, self.device)
        if self.observer is not None:
            mask = inputs.get("attention_mask")
            self.observer.start_batch(mask if isinstance(mask, torch.Tensor) and mask.ndim == 2 else None)
        hidden_states, self.first_decoder_layer = _hidden_states(self.model, inputs)
        self.num_hidden_states = len(hidden_states)
        if self.selected is None:  # the first batch tells how many hidden states there are
            self.selected = _resolve_layers(self.layers, len(hidden_states))
        token_mask = _token_mask(inputs, hidden_states[0])
        for index in self.selected:
            for metric, values in hidden_state_metrics(hidden_states[index], token_mask, self.hidden_names).items():
                self.accumulator.add(metric, index, values)
        if self.observer is not None:
            last = len(hidden_states) - 1
            self.observer.end_batch(last, self.accumulator.add, set(self.selected), self.first_decoder_layer)
            self.check_attention()
        self.num_samples += hidden_states[0].shape[0]

    def report(self, model_name: str | None) -> OversmoothingReport:
        if self.num_samples == 0:
            raise ValueError("`batches` yielded no samples: nothing to measure.")
        if self.observer is not None and self.observer.error is not None:
            message = _unavailable(self.attention_names, self.model, self.observer.error)
            warnings.warn(message + " Only the hidden-state metrics are reported.", stacklevel=3)
        if model_name is None:
            config = getattr(self.model, "config", None)
            model_name = getattr(config, "name_or_path", None) or type(self.model).__name__
        layer_ids, values, counts = self.accumulator.result()
        metadata = {"model_class": type(self.model).__name__, "num_hidden_states": self.num_hidden_states}
        if self.first_decoder_layer is not None:
            metadata["decoder_layers"] = list(range(self.first_decoder_layer, self.num_hidden_states))
        return OversmoothingReport(
            values=values,
            layers=layer_ids,
            counts=counts,
            num_samples=self.num_samples,
            model_name=model_name,
            metadata=metadata,
        )
