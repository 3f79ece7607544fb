"""Perplexity of a causal language model on a token stream, with the paper's sliding window and with blocks.

    from hf_neutreno.data.lm_eval import evaluate_lm
    results = evaluate_lm(model, token_ids, context_length=256)    # {"sliding": LMEvalResult, "blocks": ...}

`hf-neutreno evaluate-lm` (`hf_neutreno.commands.evaluate_lm`) runs it on a saved model and a WikiText split.

Both protocols score every token of the stream except the first, each exactly once, so their token counts are equal
and their perplexities comparable:

- `sliding`: the paper's protocol (Al-Rfou et al. 2019; Schlag et al. 2021; NeuTRENO App. A.3). A window of the
  training context slides over the stream one token at a time; the first window scores all its positions, every
  later window only its last one, which therefore always sees a full context. Mathematically batch size 1; here
  several windows run in one forward (same length, no padding), which gives the same numbers.
- `blocks`: non-overlapping blocks of the context length, each scoring all its positions (the first token of a
  block sees no context from the previous block). Cheaper and pessimistic.

Works for any `transformers` causal LM whose logits are (log-)scores over the vocabulary: NeuTRENO GPT (full or
adaptive softmax) or a native model such as `GPT2LMHeadModel`.
"""

import inspect
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import torch
from tqdm.auto import tqdm

from ..names import PROTOCOLS  # shown by `hf-neutreno evaluate-lm --help` without torch


@dataclass(frozen=True)
class Window:
    """Input tokens ``stream[start:end]``; the last `num_scored` positions are scored, i.e. the targets
    ``stream[end - num_scored + 1 : end + 1]``."""

    start: int
    end: int
    num_scored: int

    @property
    def targets(self) -> range:
        return range(self.end - self.num_scored + 1, self.end + 1)


@dataclass
class LMEvalResult:
    protocol: str
    context_length: int
    num_tokens: int  # scored tokens
    nll: float  # summed negative log-likelihood, nats

    @property
    def loss(self) -> float:
        return self.nll / self.num_tokens

    @property
    def perplexity(self) -> float:
        return math.exp(self.loss)

    def to_dict(self) -> dict:
        return {**asdict(self), "loss": self.loss, "perplexity": self.perplexity}


def _check(num_tokens: int, context_length: int) -> None:
    if context_length < 1:
        raise ValueError(f"`context_length` must be >= 1, got {context_length}.")
    if num_tokens < 2:
        raise ValueError(f"The token stream needs at least 2 tokens to score one, got {num_tokens}.")


def sliding_windows(num_tokens: int, context_length: int) -> Iterator[Window]:
    """The paper's windows over a stream of `num_tokens`: one window of up to `context_length` scoring everything,
    then one window per remaining token, shifted by one, scoring only its last position."""
    _check(num_tokens, context_length)
    first_end = min(context_length, num_tokens - 1)
    yield Window(0, first_end, first_end)
    for start in range(1, num_tokens - context_length):
        yield Window(start, start + context_length, 1)


def blocks(num_tokens: int, context_length: int) -> Iterator[Window]:
    """Non-overlapping windows of `context_length` tokens scoring all their positions (the last may be shorter)."""
    _check(num_tokens, context_length)
    for start in range(0, num_tokens - 1, context_length):
        end = min(start + context_length, num_tokens - 1)
        yield Window(start, end, end - start)


def _model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _forward_log_probs(model, input_ids: torch.Tensor, keep_last: int) -> torch.Tensor:
    """Log-probabilities (batch, keep_last, vocab) of the last `keep_last` positions, fp32."""
    kwargs = {"use_cache": False}
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        kwargs["logits_to_keep"] = keep_last
    logits = model(input_ids=input_ids, **kwargs).logits[:, -keep_last:]
    return logits.float().log_softmax(dim=-1)  # the identity (up to rounding) on an adaptive head's log-probs


def _score(model, stream: torch.Tensor, windows: list[Window]) -> float:
    """Summed NLL of equally shaped windows run as one batch."""
    device = _model_device(model)
    keep = windows[0].num_scored
    inputs = torch.stack([stream[w.start : w.end] for w in windows]).to(device)
    targets = torch.stack([stream[w.targets.start : w.targets.stop] for w in windows]).to(device)
    log_probs = _forward_log_probs(model, inputs, keep)
    return -log_probs.gather(-1, targets.unsqueeze(-1)).sum().item()


@torch.no_grad()
def evaluate_windows(
    model, token_ids: torch.Tensor, windows: Iterator[Window], batch_size: int = 1, progress: bool = False
) -> tuple[float, int]:
    """Summed NLL and number of scored tokens over `windows`; consecutive windows of the same shape are batched."""
    if batch_size < 1:
        raise ValueError(f"`batch_size` must be >= 1, got {batch_size}.")
    was_training = model.training
    model.eval()
    stream = token_ids.reshape(-1).long().cpu()
    nll, scored, batch = 0.0, 0, []
    try:
        for window in tqdm(windows, disable=not progress, mininterval=2.0, desc="Evaluating"):
            if batch and (window.end - window.start, window.num_scored) != (
                batch[0].end - batch[0].start,
                batch[0].num_scored,
            ):
                nll += _score(model, stream, batch)
                batch = []
            batch.append(window)
            scored += window.num_scored
            if len(batch) == batch_size:
                nll += _score(model, stream, batch)
                batch = []
        if batch:
            nll += _score(model, stream, batch)
    finally:
        model.train(was_training)
    return nll, scored


def sliding_window_eval(
    model, token_ids: torch.Tensor, context_length: int, batch_size: int = 32, progress: bool = False
) -> LMEvalResult:
    """The paper's protocol (see the module docstring). `batch_size` windows run per forward."""
    windows = sliding_windows(token_ids.numel(), context_length)
    nll, scored = evaluate_windows(model, token_ids, windows, batch_size, progress)
    return LMEvalResult("sliding", context_length, scored, nll)


def block_eval(
    model, token_ids: torch.Tensor, context_length: int, batch_size: int = 1, progress: bool = False
) -> LMEvalResult:
    """Non-overlapping blocks of `context_length` tokens. Each forward holds (batch, context, vocab) log-probs."""
    nll, scored = evaluate_windows(model, token_ids, blocks(token_ids.numel(), context_length), batch_size, progress)
    return LMEvalResult("blocks", context_length, scored, nll)


def evaluate_lm(
    model,
    token_ids: torch.Tensor,
    context_length: int | None = None,
    protocols: tuple[str, ...] = PROTOCOLS,
    sliding_batch_size: int = 32,
    block_batch_size: int = 1,
    progress: bool = False,
) -> dict[str, LMEvalResult]:
    """Both protocols (or those named); `context_length` defaults to `model.config.max_position_embeddings`."""
    for protocol in protocols:
        if protocol not in PROTOCOLS:
            raise ValueError(f"Unknown protocol {protocol!r}; choose from {list(PROTOCOLS)}.")
    if context_length is None:
        context_length = model.config.max_position_embeddings
    results = {}
    if "sliding" in protocols:
        results["sliding"] = sliding_window_eval(model, token_ids, context_length, sliding_batch_size, progress)
    if "blocks" in protocols:
        results["blocks"] = block_eval(model, token_ids, context_length, block_batch_size, progress)
    return results


__all__ = [
    "LMEvalResult",
    "Window",
    "block_eval",
    "blocks",
    "evaluate_lm",
    "evaluate_windows",
    "sliding_window_eval",
    "sliding_windows",
]
