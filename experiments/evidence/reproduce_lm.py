"""The WikiText-2 units' training and scoring: the paper's `wikitext103-small` LM (adaptive-softmax cutoffs scaled to
the 33k vocabulary), validation perplexity during training, then validation and test perplexity with the paper's
sliding window and with blocks."""

import functools
import json
import math
import os
from pathlib import Path

import torch
from safetensors.torch import load_model, save_model
from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

from hf_neutreno import NeuTRENOGPTConfig
from hf_neutreno.data.lm_eval import block_eval, sliding_window_eval
from hf_neutreno.data.text import group_into_blocks, load_wikitext, token_stream, train_word_tokenizer
from hf_neutreno.engine.model_factories import language_model
from hf_neutreno.engine.variants import VARIANTS, build_variant
from hf_neutreno.examples import recipes
from hf_neutreno.runtime import has_accelerator
from hf_neutreno.value_path import learned_coefficients

from .reproduce_training import Context, CurvePoints, dataset_source, precision, train_resumably

LM_LAMBDAS = {"softmax": 0.0, "neutreno": NeuTRENOGPTConfig().neutreno_lambda}  # 0.4: the official WikiText-103 code
# The paper's cutoffs [20000, 40000, 200000] over 267,735 words, scaled by the vocabulary ratio (33,279 / 267,735 ≈
# 1/8) and rounded: the same four clusters covering the same share of the frequency-sorted vocabulary.
LM_CUTOFFS = [2500, 5000, 25000]
SHAPE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "norm_position")


@functools.cache
def wikitext(data: str | None):
    """The word-level tokenizer trained on the training split, its contiguous 256-token training blocks, and the
    validation and test token streams."""
    raw = load_wikitext(*dataset_source(data, "wikitext-2-v1"))
    tokenizer = train_word_tokenizer(raw["train"])
    context = NeuTRENOGPTConfig.from_preset("wikitext103-small").max_position_embeddings
    streams = {split: token_stream(raw[split], tokenizer) for split in ("validation", "test")}
    return tokenizer, group_into_blocks(raw["train"], tokenizer, context), streams, context


def lm_builder(context: Context, coefficients: dict | None = None, last_layers: dict | None = None):
    """`build(variant)` for `run_paired`: softmax or NeuTRENO at the official λ (which adds no parameter), or a
    value path (`coefficients`: its coefficient by method) on the softmax model, in every layer after the first or,
    for the methods in `last_layers`, in that many last layers."""
    budget = context.budget
    tokenizer, _, _, block = wikitext(context.data)
    overrides = {
        "num_hidden_layers": budget.lm_layers,
        "intermediate_size": budget.lm_intermediate_size,
        "norm_position": budget.lm_norm_position,
        "attn_implementation": budget.attn_implementation,
    }
    overrides = {k: v for k, v in overrides.items() if v}

    def build(name: str):
        lam = LM_LAMBDAS.get(name, 0.0)
        model = language_model(
            "wikitext103-small",
            tokenizer,
            block_size=block,
            neutreno_lambda=lam,
            adaptive_softmax_cutoffs=LM_CUTOFFS,
            **overrides,
        )
        if name in LM_LAMBDAS:
            return model
        method, depth = VARIANTS[name].method, model.config.num_hidden_layers
        last = (last_layers or {}).get(name)
        layers = list(range(depth - last, depth)) if last else None
        return build_variant(model, name, coefficients[method], layers=layers)

    return build


def lm_trainer(model, context: Context, seed: int) -> Trainer:
    """The paper's schedule (Adam, cosine to 0, clip 0.25) with the budget's length, batch, warm-up and learning
    rate; a checkpoint at every learning-curve point (validation block perplexity every `lm_eval_steps` steps)."""
    budget = context.budget
    tokenizer, blocks, streams, block = wikitext(context.data)
    schedule = {
        **recipes.PAPER_LM_TRAINING,
        "max_steps": budget.lm_steps,
        "seed": seed,
        "per_device_train_batch_size": budget.lm_batch_size,
        "learning_rate": budget.lm_learning_rate,
        "warmup_steps": budget.lm_warmup_steps,
    }
    every = budget.lm_eval_steps or budget.lm_steps
    args = TrainingArguments(
        output_dir=context.work_dir,
        **schedule,
        **precision(budget),
        dataloader_pin_memory=has_accelerator(),  # pinning helps only an accelerator, and warns without one
        save_strategy="steps",
        save_steps=every,
        save_total_limit=1,
        logging_steps=every,
        report_to=[],
        disable_tqdm=True,
    )
    curve_stream = streams["validation"][: budget.lm_curve_tokens]
    callback = (
        StepPerplexity(curve_stream, block, budget.lm_eval_steps, budget.lm_patience)
        if budget.lm_eval_steps
        else CurvePoints()
    )
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)
    return Trainer(model=model, args=args, train_dataset=blocks, callbacks=[callback], data_collator=collator)


def run_lm(model, context: Context, seed: int) -> dict:
    """`model` (built by `lm_builder`) trained and scored on both splits with the sliding window and with blocks."""
    budget = context.budget
    tokenizer, _, streams, block = wikitext(context.data)
    trained, loss, curve, seconds_before_resume = train_resumably(lm_trainer(model, context, seed), context.work_dir)
    config = model.config
    result = {}
    if budget.lm_patience:  # early stopping: the model evaluated below is the best curve point's
        best = min(curve, key=lambda point: point["perplexity"])
        load_model(model, StepPerplexity.best_path(context.work_dir))
        result.update(best_step=best["step"], stopped_early=trained.global_step < budget.lm_steps)
    if getattr(config, "value_path", None):
        result.update(value_path=config.value_path, learned_coefficients=learned_coefficients(model))
    result |= {
        "steps": trained.global_step,
        "train_loss": loss,
        "parameters": model.num_parameters(),
        "seconds_before_resume": seconds_before_resume,
        "train_tokens": trained.global_step * budget.lm_batch_size * block,
        "vocab_size": len(tokenizer),
        "train_seconds": trained.metrics["train_runtime"],
        "context": block,
        "shape": {k: getattr(config, k) for k in SHAPE_FIELDS},
    }
    if curve:
        result["curve"] = curve
    for split, stream in streams.items():
        windows = 256 if torch.cuda.is_available() else 32  # windows per forward: the same numbers, any batch
        sliding = sliding_window_eval(model, stream[: budget.sliding_tokens], block, batch_size=windows)
        blocks = block_eval(model, stream[: budget.block_tokens], block, batch_size=8)
        result[split] = {"sliding": sliding.to_dict(), "blocks": blocks.to_dict(), "split_tokens": len(stream)}
    return result


class StepPerplexity(CurvePoints):
    """A curve point {step, tokens, perplexity} (non-overlapping blocks of `stream`) every `every` steps and at the
    last step. With `patience`, the weights of the best point so far are kept in `<output_dir>/best.safetensors` and
    training stops once `patience` points in a row are no better. The best is read from the curve in the Trainer's
    log history, which checkpoints save, so a resumed run stops where an uninterrupted one would."""

    def __init__(self, stream: torch.Tensor, context: int, every: int, patience: int | None = None):
        super().__init__()
        self.stream, self.context, self.every, self.patience = stream, context, every, patience

    @staticmethod
    def best_path(output_dir: str) -> str:
        return os.path.join(output_dir, "best.safetensors")

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every and state.global_step != state.max_steps:
            return
        result = block_eval(model, self.stream, self.context, batch_size=8)  # restores training mode
        self.add(state, {"step": state.global_step, "tokens": result.num_tokens, "perplexity": result.perplexity})
        if not self.patience:
            return
        curve = [entry["curve"]["perplexity"] for entry in state.log_history if "curve" in entry]
        best = curve.index(min(curve))
        if best == len(curve) - 1:
            os.makedirs(args.output_dir, exist_ok=True)
            save_model(model, self.best_path(args.output_dir))  # handles the tied input/output embeddings
        elif len(curve) - 1 - best >= self.patience:
            control.should_training_stop = True


def unigram_reference(out: Path, data: str | None) -> None:
    """`<out>/wikitext2_unigram.json`: the perplexity, on the tokens the LM units scored, of the training split's
    add-one-smoothed unigram distribution; what a model that ignores all context achieves, to read them against."""
    path, lm_units = out / "wikitext2_unigram.json", sorted((out / "units").glob("lm-*.json"))
    if path.exists() or not lm_units:
        return
    budget = json.loads(lm_units[0].read_text())["budget"]
    tokenizer, blocks, streams, _ = wikitext(data)
    counts = torch.bincount(blocks.with_format("torch")[:]["input_ids"].flatten(), minlength=len(tokenizer)) + 1
    log_probs = (counts / counts.sum()).log()
    prefixes = {"sliding": budget["sliding_tokens"], "blocks": budget["block_tokens"]}
    # Both protocols score every token of their prefix but the first.
    perplexity = {
        split: {protocol: math.exp(-log_probs[stream[1:tokens]].mean().item()) for protocol, tokens in prefixes.items()}
        for split, stream in streams.items()
    }
    path.write_text(json.dumps(perplexity, indent=1))
