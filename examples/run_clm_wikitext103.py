#!/usr/bin/env python
"""Train the NeuTRENO (or softmax baseline) language model on WikiText-103 with `Trainer`, the paper's recipe.

The defaults are the paper's set-up (NeuTRENO App. A.3, lmtool-fwp "small"): the `wikitext103-small` preset
(16 layers, dim 128, 8 heads, FFN 2048, context 256, post-LN, sinusoidal positions, tied adaptive softmax
[20000, 40000, 200000], dropout 0.1), Adam (AdamW with weight decay 0 is the same update) at lr 2.5e-4, 2000 warm-up
steps then cosine to 0 over 500k steps, batch 96, gradient clipping 0.25, λ = 0.4. At the end the model is evaluated
with the paper's sliding window and with non-overlapping blocks (`hf_neutreno.data.lm_eval`) on validation and test.

    # the paper's NeuTRENO run (one GPU); --neutreno-lambda 0 for the softmax baseline; add --push-to-hub to publish
    python examples/run_clm_wikitext103.py --output-dir runs/neutreno-wt103 --bf16 --eval-strategy steps \
        --eval-steps 10000 --save-steps 10000 --logging-steps 200

    # a minutes-long CPU smoke run on WikiText-2 (a local Parquet copy works as --dataset-name too)
    python examples/run_clm_wikitext103.py --dataset-name Salesforce/wikitext --dataset-config-name wikitext-2-v1 \
        --output-dir runs/wt2-smoke \
        --config-overrides num_hidden_layers=2,hidden_size=64,num_attention_heads=4,intermediate_size=256 \
        --adaptive-softmax-cutoffs 2000 10000 --block-size 64 --max-steps 200 --warmup-steps 20 \
        --per-device-train-batch-size 32 --learning-rate 3e-3 --max-eval-tokens 20000

An `--output-dir` that already holds a run is refused unless `--overwrite-output-dir` is given;
`--resume-from-checkpoint` continues an interrupted run from its last checkpoint there (or from the checkpoint folder
it names). A model checkpoint as `--model-name-or-path` starts from it: a NeuTRENO GPT, or a native GPT-2 converted with
`hf_neutreno.convert.gpt2_to_neutreno` (the paper's "NeuTRENO adaptation"), then trained on WikiText with the
checkpoint's own tokenizer. The tokenizer is saved with the model, so `AutoTokenizer` and
`AutoModelForCausalLM(..., trust_remote_code=True)` load the output folder without this package.
"""

import logging
import sys
from dataclasses import dataclass, field

from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling

import hf_neutreno.models  # noqa: F401  (registers the NeuTRENO classes with the Auto API)
from hf_neutreno import NeuTRENOGPTConfig, NeuTRENOGPTForCausalLM
from hf_neutreno.convert import gpt2_to_neutreno
from hf_neutreno.data.lm_eval import PROTOCOLS, evaluate_lm
from hf_neutreno.data.text import group_into_blocks, load_wikitext, token_stream, train_word_tokenizer
from hf_neutreno.engine.model_factories import language_model
from hf_neutreno.examples import recipes, scripts
from hf_neutreno.hub import HubTrainer

logger = logging.getLogger(__name__)


BUILT = "a preset or a converted GPT-2"  # where the model flags' defaults apply; a NeuTRENO GPT keeps its own


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        default="wikitext103-small",
        metadata={
            "help": f"A preset {sorted(NeuTRENOGPTConfig.presets)} to train from scratch, or a NeuTRENO GPT "
            "or GPT-2 checkpoint (folder or Hub id) to continue from."
        },
    )
    neutreno_lambda: float | None = scripts.neutreno_lambda_field(NeuTRENOGPTConfig, built=BUILT)
    neutreno_layers: list[int] | None = scripts.neutreno_layers_field(BUILT)
    adaptive_softmax_cutoffs: list[int] | None = field(
        default=None, metadata={"help": "Cutoffs of a model trained from scratch (default: the preset's)."}
    )
    config_overrides: str | None = scripts.config_overrides_field()
    tokenizer_name: str | None = field(
        default=None,
        metadata={
            "help": "A saved tokenizer (default: the checkpoint's, else a word-level one trained on the train split)."
        },
    )
    max_vocab_size: int | None = field(default=None, metadata={"help": "Cap of a newly trained word vocabulary."})
    trust_remote_code: bool = scripts.trust_remote_code_field()


@dataclass
class DataArguments:
    dataset_name: str = field(
        default="Salesforce/wikitext",
        metadata={"help": "Hub dataset name, or a local folder of Parquet files with the same columns."},
    )
    dataset_config_name: str | None = field(default="wikitext-103-v1", metadata={"help": "Hub configuration."})
    block_size: int | None = field(
        default=None,
        metadata={
            "help": "Training context (default: the model's max_position_embeddings). A model trained from a "
            "preset gets max_position_embeddings = block_size, so evaluate-lm uses it as its default window."
        },
    )
    max_train_tokens: int | None = field(default=None, metadata={"help": "Train on the first N tokens only."})
    max_eval_tokens: int | None = field(
        default=None, metadata={"help": "Evaluate on the first N tokens of each split."}
    )
    eval_splits: list[str] = field(default_factory=lambda: ["validation", "test"])
    final_eval_protocols: list[str] = field(
        default_factory=lambda: list(PROTOCOLS), metadata={"help": f"Final evaluation protocols, of {list(PROTOCOLS)}."}
    )
    sliding_batch_size: int = field(
        default=32, metadata={"help": "Sliding windows per forward in the final evaluation."}
    )


def build_tokenizer(model_args: ModelArguments, train_split):
    source = model_args.tokenizer_name or (
        None if model_args.model_name_or_path in NeuTRENOGPTConfig.presets else model_args.model_name_or_path
    )
    if source is not None:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=model_args.trust_remote_code)
    logger.info("Training a word-level tokenizer on the train split")
    return train_word_tokenizer(train_split, max_vocab_size=model_args.max_vocab_size)


def build_model(model_args: ModelArguments, tokenizer, block_size: int | None) -> NeuTRENOGPTForCausalLM:
    name = model_args.model_name_or_path
    # Only the flags given: a preset or a converted GPT-2 gets the registry's λ, a NeuTRENO GPT keeps its own.
    neutreno = scripts.given(neutreno_lambda=model_args.neutreno_lambda, neutreno_layers=model_args.neutreno_layers)
    if name in NeuTRENOGPTConfig.presets:
        overrides = {**neutreno, **scripts.parse_config_overrides(model_args.config_overrides, NeuTRENOGPTConfig)}
        if model_args.adaptive_softmax_cutoffs is not None:
            overrides["adaptive_softmax_cutoffs"] = model_args.adaptive_softmax_cutoffs or None
        return language_model(name, tokenizer, block_size=block_size, **overrides)
    if model_args.config_overrides or model_args.adaptive_softmax_cutoffs:
        raise ValueError("`--config_overrides`/`--adaptive_softmax_cutoffs` apply to a preset, not to a checkpoint.")
    config = AutoConfig.from_pretrained(name, trust_remote_code=model_args.trust_remote_code)
    if config.model_type == "gpt2":
        return gpt2_to_neutreno(name, **neutreno)
    return AutoModelForCausalLM.from_pretrained(name, trust_remote_code=model_args.trust_remote_code, **neutreno)


def main(argv: list[str] | None = None) -> dict:
    parser = scripts.script_parser(ModelArguments, DataArguments)
    parser.set_defaults(**recipes.PAPER_LM_TRAINING, do_train=True)  # the script always trains
    model_args, data_args, script_args, training_args = scripts.parse_script_arguments(parser, argv, json_file=False)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    # Never overwrite an earlier run by accident; --resume-from-checkpoint (no path: the last one) continues one.
    checkpoint, push = scripts.prepare_output(training_args, script_args.overwrite_output_dir)

    raw = load_wikitext(data_args.dataset_name, data_args.dataset_config_name)
    tokenizer = build_tokenizer(model_args, raw["train"])
    model = build_model(model_args, tokenizer, data_args.block_size)
    block_size = data_args.block_size or model.config.max_position_embeddings
    logger.info(
        "%s, λ = %s, %.1fM parameters, block %d",
        type(model).__name__,
        model.config.neutreno_lambda,
        model.num_parameters() / 1e6,
        block_size,
    )
    trainer = HubTrainer(
        model=model,
        args=training_args,
        train_dataset=training_blocks(raw, tokenizer, block_size, data_args),
        eval_dataset=evaluation_blocks(raw, tokenizer, block_size, data_args, training_args.eval_strategy),
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        processing_class=tokenizer,  # saved with every checkpoint
    )
    metrics = scripts.train_and_save(trainer, checkpoint)
    metrics.update(final_evaluation(trainer.model, raw, tokenizer, block_size, data_args))
    metrics["context_length"] = block_size
    trainer.log_metrics("final", metrics)
    trainer.save_metrics("final", metrics)
    if push:
        push_with_results(trainer, metrics, model_args, data_args, block_size)
    return metrics


def training_blocks(raw, tokenizer, block_size: int, data_args: DataArguments):
    """The train split in blocks of `block_size` tokens (the first `--max-train-tokens` only, if given)."""
    blocks = group_into_blocks(raw["train"], tokenizer, block_size)
    if data_args.max_train_tokens is not None:
        blocks = blocks.select(range(min(len(blocks), data_args.max_train_tokens // block_size)))
    return blocks


def evaluation_blocks(raw, tokenizer, block_size: int, data_args: DataArguments, eval_strategy):
    """The first of `--eval-splits` in blocks, for Trainer's evaluation during training; None without one."""
    eval_split = data_args.eval_splits[0] if data_args.eval_splits else None
    if eval_split is None or eval_strategy == "no":
        return None
    blocks = group_into_blocks(raw[eval_split], tokenizer, block_size)
    if data_args.max_eval_tokens is not None:
        blocks = blocks.select(range(min(len(blocks), max(1, data_args.max_eval_tokens // block_size))))
    return blocks


def final_evaluation(model, raw, tokenizer, block_size: int, data_args: DataArguments) -> dict:
    """The paper's evaluation (batch 1 by definition; windows batched, same numbers) and block perplexity: the
    perplexity, loss and number of tokens of every split and protocol, as `<split>_<protocol>_<metric>`."""
    metrics = {}
    for split in data_args.eval_splits:
        stream = token_stream(raw[split], tokenizer, max_tokens=data_args.max_eval_tokens)
        results = evaluate_lm(
            model,
            stream,
            block_size,
            tuple(data_args.final_eval_protocols),
            sliding_batch_size=data_args.sliding_batch_size,
        )
        for protocol, result in results.items():
            prefix = f"{split}_{protocol}"
            metrics.update(
                {
                    f"{prefix}_perplexity": result.perplexity,
                    f"{prefix}_loss": result.loss,
                    f"{prefix}_tokens": result.num_tokens,
                }
            )
    return metrics


def push_with_results(trainer, metrics: dict, model_args: ModelArguments, data_args: DataArguments, block_size: int):
    """Weights, code, tokenizer and a model card with the test perplexities (else the last split's), in one commit."""
    split = "test" if "test" in data_args.eval_splits else (data_args.eval_splits or [None])[-1]
    results = (
        {
            f"{protocol} perplexity": metrics[f"{split}_{protocol}_perplexity"]
            for protocol in data_args.final_eval_protocols
        }
        if split
        else None
    )
    trainer.push_to_hub(
        dataset=data_args.dataset_name,
        dataset_config=data_args.dataset_config_name,
        dataset_split=split,
        results=results,
        base_model=scripts.hub_base_model(model_args.model_name_or_path, NeuTRENOGPTConfig.presets),
        training={"context": block_size},
    )


if __name__ == "__main__":
    scripts.run_script(main)
    sys.exit(0)
