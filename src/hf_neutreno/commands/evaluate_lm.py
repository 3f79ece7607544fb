r"""Perplexity of a causal LM on WikiText, with the paper's sliding window and with non-overlapping blocks.

    hf-neutreno evaluate-lm runs/neutreno-wt103 --dataset Salesforce/wikitext --dataset-config wikitext-103-v1 \
        --split validation test --context-length 256

MODEL is a checkpoint folder or Hub id of a causal LM saved with its tokenizer. The protocols (`sliding`: the
paper's, every token scored with a full window of context; `blocks`: cheaper and pessimistic) are described in
`hf_neutreno.data.lm_eval`. --output never replaces an existing file unless --overwrite is given.
"""

import argparse
import json
import sys

from ..checkpoints import check_source, load_checkpoint
from ..names import PROTOCOLS
from . import check_output_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="Checkpoint folder or Hub id of a causal LM saved with its tokenizer.")
    parser.add_argument("--dataset", default="Salesforce/wikitext", help="Hub dataset or local Parquet folder.")
    parser.add_argument("--dataset-config", default="wikitext-103-v1", help="Hub configuration (ignored for folders).")
    parser.add_argument("--split", nargs="+", default=["validation", "test"], help="Splits to evaluate.")
    parser.add_argument(
        "--context-length",
        type=int,
        default=None,
        help="Window / block length (default: the model's max_position_embeddings; use the training context).",
    )
    parser.add_argument("--protocol", nargs="+", choices=PROTOCOLS, default=list(PROTOCOLS))
    parser.add_argument("--batch-size", type=int, default=32, help="Sliding windows per forward.")
    parser.add_argument("--block-batch-size", type=int, default=1, help="Blocks per forward.")
    parser.add_argument("--max-tokens", type=int, default=None, help="Evaluate only the first N tokens of a split.")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available).")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    parser.add_argument("--trust-remote-code", action="store_true", help="Allow code saved with the checkpoint.")
    parser.add_argument("--output", default=None, help="Also write the results as JSON to this file.")
    parser.add_argument("--overwrite", action="store_true", help="Replace an existing --output file.")


def run(args: argparse.Namespace) -> int:
    # Cheap checks first: a typo should cost neither loading a model nor importing torch.
    for flag, value, least in (
        ("--context-length", args.context_length, 1),
        ("--batch-size", args.batch_size, 1),
        ("--block-batch-size", args.block_batch_size, 1),
        ("--max-tokens", args.max_tokens, 2),
    ):
        if value is not None and value < least:
            raise ValueError(f"{flag} must be at least {least}, got {value}.")
    check_source(args.model, "MODEL")
    output = check_output_file(args.output, "--output", args.overwrite) if args.output else None
    # torch, transformers and datasets are imported here, not at the top: `--help` and a bad flag need none.
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from ..auto_classes import register_auto_classes
    from ..data.lm_eval import evaluate_lm
    from ..data.text import load_wikitext, token_stream

    register_auto_classes()  # a NeuTRENO GPT's config loads with this package's class, without remote code
    config = AutoConfig.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
    saved_value_path = getattr(config, "value_path", None)
    if saved_value_path is not None and not args.trust_remote_code:
        raise ValueError(
            f"{args.model!r} was saved with a value path ({saved_value_path}), which only --trust-remote-code loads; "
            "without it transformers builds the plain model, whose perplexity this would report."
        )
    dataset = load_wikitext(args.dataset, args.dataset_config)
    for split in args.split:
        if split not in dataset:
            raise ValueError(f"Unknown split {split!r}; the dataset has {sorted(dataset)}.")

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model = load_checkpoint(
        args.model, AutoModelForCausalLM, trust_remote_code=args.trust_remote_code, dtype=getattr(torch, args.dtype)
    ).to(device)
    tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
    report = {"model": args.model, "dataset": args.dataset, "results": {}}
    for split in args.split:
        stream = token_stream(dataset[split], tokenizer, max_tokens=args.max_tokens)
        results = evaluate_lm(
            model,
            stream,
            args.context_length,
            tuple(args.protocol),
            sliding_batch_size=args.batch_size,
            block_batch_size=args.block_batch_size,
            progress=sys.stderr.isatty(),
        )
        report["results"][split] = {name: result.to_dict() for name, result in results.items()}
        for name, result in results.items():
            print(
                f"{split:>10} {name:>7}: perplexity {result.perplexity:10.3f}  loss {result.loss:.4f}  "
                f"tokens {result.num_tokens}  context {result.context_length}"
            )
    if output is not None:
        with open(output, "w") as f:
            json.dump(report, f, indent=2)
    return 0
