"""NeuTRENO GPT against the native `GPT2LMHeadModel` of the same dimensions, side by side in one run.

For each shape the native model is built, and the NeuTRENO model is `gpt2_to_neutreno(native, neutreno_lambda=0.4)`:
the same weights and architecture, so the ratios measure the cost of the implementation plus the NeuTRENO term (a
guard checks that λ = 0 reproduces the native logits). Both use the same attention kernel (`--attn`, SDPA).

- training tokens/s: forward + backward + AdamW step on (batch, context) blocks of Zipf-distributed ids (like words);
- training memory: the peak allocated during a step above what was allocated before it (`step peak`), and the same
  plus weights and optimizer state (`total`);
- generation tokens/s: greedy `generate` with the KV cache (DynamicCache), fixed prompt and number of new tokens;
- context scaling: the paper's shape at context 256 → 2048 with the same number of tokens per step (the batch
  shrinks as the context grows), so the NeuTRENO/native ratio shows whether the cost grows like the baseline's.

Shapes: `paper` (the paper's dimensions: 16 layers, dim 128, 8 heads, FFN 2048 ReLU, context 256, with WikiText-2's
33,279-word vocabulary and a full softmax, which GPT-2 can represent) and `gpt2-small` (124M). `--as-trained` adds
an informational row: the `wikitext103-small` preset as the paper trains it (post-LN, sinusoidal positions, tied
adaptive softmax over 267,735 words) against the native GPT-2 of the same dimensions with a full softmax.

    python -m experiments bench-gpt --quick                                 # CPU, a few minutes
    python -m experiments bench-gpt --dtype bf16 --batch-size 32 --as-trained  # GPU
"""

import argparse
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from hf_neutreno import NeuTRENOGPTConfig, NeuTRENOGPTForCausalLM
from hf_neutreno.convert import gpt2_to_neutreno

from .common import adamw_step, add_common_arguments, autocast, compiled_ratio, machine, report, setup, side_by_side

SHAPES = {
    "paper": dict(
        n_layer=16, n_embd=128, n_head=8, n_inner=2048, activation_function="relu", n_positions=256, vocab_size=33279
    ),
    "gpt2-small": dict(
        n_layer=12,
        n_embd=768,
        n_head=12,
        n_inner=3072,
        activation_function="gelu_new",
        n_positions=1024,
        vocab_size=50257,
    ),
}
WT103_VOCAB = 267735
NATIVE, NEUTRENO = "native", "neutreno"
LABELS = {NATIVE: "native", NEUTRENO: "NeuTRENO"}


def build_pair(
    shape: str, neutreno_lambda: float, attn: str, device, context: int, layers: int | None = None
) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    dims = dict(SHAPES["paper" if shape == "as-trained" else shape])
    if layers:
        dims["n_layer"] = layers
    dims["n_positions"] = max(dims["n_positions"], context)
    if shape == "as-trained":
        dims["vocab_size"] = WT103_VOCAB
    config = GPT2Config(**dims, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    native = GPT2LMHeadModel._from_config(config, attn_implementation=attn)
    if shape == "as-trained":
        preset = NeuTRENOGPTConfig.from_preset(
            "wikitext103-small",
            embedding_dropout=0.0,
            hidden_dropout=0.0,
            activation_dropout=0.0,
            output_dropout=0.0,
            neutreno_lambda=neutreno_lambda,
            bos_token_id=0,
            eos_token_id=0,
            num_hidden_layers=dims["n_layer"],
        )
        neutreno = NeuTRENOGPTForCausalLM._from_config(preset, attn_implementation=attn)
    else:
        neutreno = gpt2_to_neutreno(native, neutreno_lambda=neutreno_lambda)
        neutreno.set_attn_implementation(attn)
    return {NATIVE: native.to(device), NEUTRENO: neutreno.to(device)}


def zipf_ids(vocab: int, shape: tuple[int, int], device) -> torch.Tensor:
    """Word-like token ids (frequency ∝ 1/rank): what an adaptive softmax's shortlist and clusters are built for."""
    generator = torch.Generator().manual_seed(0)
    ranks = torch.arange(1, vocab + 1, dtype=torch.float64)
    ids = torch.multinomial(1 / ranks, shape[0] * shape[1], replacement=True, generator=generator)
    return ids.view(shape).to(device)


def make_train_step(model, ids: torch.Tensor, device, dtype):
    return adamw_step(model, {"input_ids": ids, "labels": ids, "use_cache": False}, device, dtype)


def make_generate(model, prompt: torch.Tensor, new_tokens: int, device, dtype):
    model.eval()
    kwargs = dict(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        use_cache=True,
        pad_token_id=0,
        eos_token_id=None,
    )

    def generate():
        with torch.no_grad(), autocast(device, dtype):
            out = model.generate(prompt, **kwargs)
        assert out.shape[1] == prompt.shape[1] + new_tokens

    return generate


def lambda_zero_logit_diff(models, device) -> float:
    """λ = 0 must reproduce the native logits: a guard that the two models really are the same network."""
    native, neutreno = models[NATIVE], models[NEUTRENO]
    if neutreno.config.adaptive_softmax_cutoffs or neutreno.config.norm_position != "pre":
        return float("nan")  # the as-trained preset is another architecture
    ids = torch.randint(0, native.config.vocab_size, (1, 32), device=device)
    lam = neutreno.config.neutreno_lambda
    neutreno.config.neutreno_lambda = 0.0  # the attention layers read λ from the config at every forward
    try:
        with torch.no_grad():
            diff = (native.eval()(ids).logits.float() - neutreno.eval()(ids).logits.float()).abs().max().item()
    finally:
        neutreno.config.neutreno_lambda = lam
    return diff


def training_row(models, batch: int, context: int, device, dtype, args, compiled: bool = True) -> dict:
    """One training comparison; with `--compile` and `compiled`, also under torch.compile."""
    ids = zipf_ids(models[NATIVE].config.vocab_size, (batch, context), device)
    steps = {name: make_train_step(model, ids, device, dtype) for name, model in models.items()}
    row = side_by_side(
        steps, models, LABELS, batch * context, "train tok/s", device, args, ratio="train throughput ratio"
    )
    if compiled:
        row |= compiled_ratio(lambda m: make_train_step(m, ids, device, dtype), models, LABELS, device, args)
    for _, optimizer in steps.values():
        optimizer.state.clear()  # the next row builds its own
    return row


def generation_row(models, device, dtype, args) -> dict:
    vocab = models[NATIVE].config.vocab_size
    prompt = torch.randint(1, vocab, (args.gen_batch_size, args.prompt_len), device=device)
    steps = {
        name: (make_generate(model, prompt, args.new_tokens, device, dtype), None) for name, model in models.items()
    }
    return side_by_side(
        steps,
        None,
        LABELS,
        args.gen_batch_size * args.new_tokens,
        "generate tok/s",
        device,
        args,
        ratio="generate throughput ratio",
        warmup=1,
    )


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser)
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--as-trained", action="store_true", help="add the paper's preset with its adaptive softmax")
    parser.add_argument("--neutreno-lambda", type=float, default=0.4)
    parser.add_argument("--context", type=int, default=256, help="training context of the shape rows")
    parser.add_argument(
        "--scaling-contexts",
        type=int,
        nargs="*",
        default=[256, 512, 1024, 2048],
        help="contexts of the scaling rows (paper shape; none: skip them)",
    )
    parser.add_argument("--gen-batch-size", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    return parser.parse_args(argv)


def shape_rows(args, batch: int, device, dtype) -> list[dict]:
    """One row per shape: the λ = 0 guard, training and generation, NeuTRENO against native side by side."""
    rows = []
    for shape in args.shapes + (["as-trained"] if args.as_trained else []):
        models = build_pair(shape, args.neutreno_lambda, args.attn, device, args.context, args.num_hidden_layers)
        row = {
            "shape": shape,
            "context": args.context,
            "batch": batch,
            "λ=0 max |Δlogit|": lambda_zero_logit_diff(models, device),
        }
        row |= training_row(models, batch, args.context, device, dtype, args)
        row |= generation_row(models, device, dtype, args)
        rows.append(row)
        del models
    return rows


def scaling_rows(args, batch: int, device, dtype) -> list[dict]:
    """Training rows of the paper's shape at each of `--scaling-contexts`, the same number of tokens per step."""
    scaling = []
    tokens_per_step = max(batch * min(args.scaling_contexts), max(args.scaling_contexts))
    models = build_pair(
        "paper", args.neutreno_lambda, args.attn, device, max(args.scaling_contexts), args.num_hidden_layers
    )
    for context in args.scaling_contexts:
        scale_batch = max(1, tokens_per_step // context)
        scaling.append(
            {"shape": "paper", "context": context, "batch": scale_batch}
            | training_row(models, scale_batch, context, device, dtype, args, compiled=False)
        )
    del models
    return scaling


def main(argv=None) -> None:
    args = parse_args(argv)
    device, dtype = setup(args)
    if args.quick:
        args.gen_batch_size, args.new_tokens = 1, 32
    batch = args.batch_size or (4 if args.quick or device.type == "cpu" else 32)
    args.rounds = args.rounds or (3 if args.quick else 7)
    rows = shape_rows(args, batch, device, dtype)
    scaling = scaling_rows(args, batch, device, dtype) if args.scaling_contexts else []

    meta = machine(args) | {
        "λ": args.neutreno_lambda,
        "rounds": args.rounds,
        "generate": f"{args.gen_batch_size} × ({args.prompt_len} prompt + {args.new_tokens} new)",
    }
    report(f"NeuTRENO GPT (λ = {args.neutreno_lambda}) vs native GPT-2 of the same dimensions", rows, meta, args.out)
    if scaling:
        scaling_out = None if not args.out else str(Path(args.out).with_name(Path(args.out).stem + "_scaling.json"))
        report("Context scaling, paper shape, same tokens per step", scaling, meta, scaling_out)
