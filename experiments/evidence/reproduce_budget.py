"""The reproductions' budgets: how much each tier computes (the recipe is the same for every variant and budget)."""

import dataclasses

# Kernels every model here supports (flash_attention_2 needs the flash-attn package and a GPU).
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2", "flex_attention")


@dataclasses.dataclass(kw_only=True)
class Budget:
    """How much is computed. `None` means "all of it" for sample and token counts, "the preset's" for depths. The
    defaults are the papers' scale: 3 seeds, all the data, every evaluation at full size."""

    seeds: list[int] = dataclasses.field(default_factory=lambda: [0, 1, 2])
    train_samples: int | None = None  # CIFAR-10 training images that make "100 %": a subset drawn with the run's seed
    epochs: float
    batch_size: int
    test_samples: int | None = None  # a fixed subset of the 10,000 test images (clean accuracy)
    corruption_samples: int = 10000  # the first N of those, corrupted (8 corruptions × severities 1-5)
    oversmoothing_samples: int = 1000  # the first N of those, for the per-layer cosine similarity
    spectral_samples: int = 32  # the first N of those, for the dominating-eigenvalue analysis
    lm_steps: int
    lm_batch_size: int  # blocks of 256 tokens per step
    lm_learning_rate: float
    lm_warmup_steps: int
    sliding_tokens: int | None = None  # prefix of validation / test scored with the sliding window (None: whole split)
    block_tokens: int | None = None  # prefix scored with non-overlapping blocks
    vit_layers: int | None = None  # shape overrides (None: the preset's)
    lm_layers: int | None = None
    vit_hidden_size: int | None = None  # with an MLP of 4 × this
    vit_heads: int | None = None
    lm_intermediate_size: int | None = None
    lm_norm_position: str | None = None  # "pre" or "post" (None: the preset's, post-LN as in the paper)
    main_claim_seeds: list[int] | None = None  # seeds of ViT and NeuTRENO on all the data (None: `seeds`)
    lm_eval_steps: int | None = None  # learning curve: validation perplexity every N steps (None: no curve)
    lm_curve_tokens: int | None = None  # the validation prefix the curve scores with blocks (None: all of it)
    bf16: bool = False  # bf16 autocast in training (Trainer's `bf16`); evaluation stays in fp32
    attn_implementation: str | None = None  # every model's attention kernel (None: transformers' default, sdpa)
    dataloader_workers: int = 0  # CIFAR data-loading processes; the augmentation draws depend on their number
    lm_patience: int | None = None  # early stopping: stop after this many curve points without a new best
    # validation perplexity, and evaluate the best point's weights (None: train lm_steps, evaluate the last)
    segment_steps: int = 2000  # Segmenter units: optimizer steps (8 epochs of fashion-scenes' 4,000 scenes)
    segment_batch_size: int = 16
    segment_eval_samples: int = 1000  # fashion-scenes validation scenes scored (all of them)


# Fields that say which units exist, not how one is computed: a unit stays valid when they change.
PLAN_FIELDS = ("seeds", "main_claim_seeds")


BUDGETS = {
    # Every experiment and table at a toy budget, with the real shapes: a smoke run, its numbers mean nothing.
    "quick": Budget(
        train_samples=64,
        epochs=1,
        batch_size=32,
        test_samples=100,
        corruption_samples=16,
        oversmoothing_samples=32,
        spectral_samples=8,
        lm_steps=2,
        lm_batch_size=2,
        lm_learning_rate=2.5e-4,
        lm_warmup_steps=1,
        sliding_tokens=270,
        block_tokens=1024,
        lm_eval_steps=1,
        lm_curve_tokens=512,
        segment_steps=2,
        segment_batch_size=4,
        segment_eval_samples=8,
    ),
    # The run docs/results.md reports: about 2 hours on 2 shared CPU cores with --workers 2. The paper's LM learning
    # rate 2.5e-4 barely leaves the initial loss in 64 steps; 1e-3 was chosen by a 40-step pilot of the softmax
    # baseline alone over {2.5e-4, 1e-3, 3e-3} (validation block perplexity 5687, 1465, 1212; 3e-3 had stalled).
    "cpu": Budget(
        train_samples=1500,
        epochs=3,
        batch_size=32,
        test_samples=1000,
        corruption_samples=128,
        oversmoothing_samples=500,
        lm_steps=64,
        lm_batch_size=8,
        lm_learning_rate=1e-3,
        lm_warmup_steps=6,
        sliding_tokens=512,
        block_tokens=16384,
    ),
    # Models that learn on one CPU thread in about an hour each, the ones docs/results.md reports. Chosen
    # by a pilot on a validation split (5,000 training images held out; WikiText-2's validation split), never on test
    # results, with the same settings for every variant:
    # - CIFAR-10: 12 layers of width 64 (4 heads, MLP 256), patch 4, the package's CIFAR recipe; 10 epochs of all 50,000
    #   images. The pilot (45,000 images, 8-epoch schedule) was at 32.8 / 39.0 / 45.7 / 50.3 % validation accuracy
    #   after epochs 1-4; about 115 images/s on one thread.
    # - WikiText-2: the paper's model at FFN 512 (not 2048: 2.3x the tokens per second), pre-LN. The post-LN model
    #   sat at the unigram level (validation block perplexity 1019 → 987 over 200 steps of batch 16 at lr 1e-3; 1089
    #   after 250 steps at batch 4), pre-LN reached 794 / 534 after 100 / 200 steps. Two epochs (1,020 steps of
    #   16 × 256 tokens), lr 1e-3, 50 warm-up steps, cosine to 0.
    "cpu-long": Budget(
        main_claim_seeds=[0, 1, 2, 3, 4],
        epochs=10,
        batch_size=128,
        lm_steps=1020,
        lm_batch_size=16,
        lm_learning_rate=1e-3,
        lm_warmup_steps=50,
        sliding_tokens=2048,
        vit_hidden_size=64,
        vit_heads=4,
        lm_intermediate_size=512,
        lm_norm_position="pre",
        lm_eval_steps=100,
        lm_curve_tokens=32768,
    ),
    # The papers' scale: the package's CIFAR recipe (run_eigen_vit.py's defaults: 100 epochs, batch 128, all data) and
    # the paper's LM schedule (batch 96, lr 2.5e-4, 2000 warm-up steps) for as many epochs as its 500k steps make of
    # WikiText-103 (~120; 10k steps of WikiText-2), evaluated on the whole splits. For a GPU; not run yet.
    "full": Budget(
        epochs=100,
        batch_size=128,
        lm_steps=10000,
        lm_batch_size=96,
        lm_learning_rate=2.5e-4,
        lm_warmup_steps=2000,
    ),
    # The GPU tier (`experiments/run_all.py --budget gpu`, about 40 minutes of one H100 with the benchmarks; the
    # estimate is in docs/benchmarks.md). Not run yet: the GPUs lent so far, 15 minutes each, ran cpu-long units and the
    # speed benchmarks. Every variant in the poster's ViT-Ti shape (12 layers, dim 192, 3 heads, patch 4) with its whole
    # recipe (batch 128, lr 1e-3, cosine), 25 epochs of all 50,000 images instead of 100: what 4 variants x 3 seeds
    # and the data fractions fit beside the LMs.
    # The LM is the paper's model (FFN 2048) pre-LN, batch 96 (the paper's), lr 1e-3: the cpu-long pilot's
    # settings, as the post-LN model did not learn there in a short run. Trained to convergence: a cosine over at
    # most 40 epochs (3,400 steps of 85 per epoch), validation perplexity after every epoch, stopped after 5 epochs
    # without a new best, and the best epoch's weights evaluated (on the whole validation and test splits).
    # Corruptions on the first 2,000 test images: corrupting is CPU work, 400,000 images per model at 10,000.
    "gpu": Budget(
        epochs=25,
        batch_size=128,
        corruption_samples=2000,
        lm_steps=3400,
        lm_batch_size=96,
        lm_learning_rate=1e-3,
        lm_warmup_steps=170,
        lm_norm_position="pre",
        lm_eval_steps=85,
        lm_patience=5,
        bf16=True,
        attn_implementation="sdpa",
        dataloader_workers=3,
    ),
}


def same_computation(recorded: dict, budget: Budget) -> bool:
    """Whether a unit recorded under the budget `recorded` (its JSON's "budget") computed what `budget` computes.
    Fields added to `Budget` after the unit was written count as their defaults; the seed lists (which units exist)
    are not compared."""
    return all(
        recorded.get(f.name, f.default) == getattr(budget, f.name)
        for f in dataclasses.fields(Budget)
        if f.name not in PLAN_FIELDS
    )
