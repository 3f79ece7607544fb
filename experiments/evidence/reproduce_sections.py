"""The results page's sections, one per experiment (the round-2 experiments share one), each from the numbers
`reproduce_report.aggregate` computed for it; the prose around the tables is the template's."""

import math
import statistics

from .reproduce_cifar import VIT_LAMBDA
from .reproduce_claims import CIFAR_MODELS, LM_MODELS, PAPER_CORRUPTIONS, PAPER_SMOOTHING
from .reproduce_results import ACCURACY, Measure
from .reproduce_tables import comparison, delta, figure, fill, measures_of, pm, seeds, table


def vit_shape_text(shape: dict | None) -> str:
    """'12 layers, dim 64, 4 heads, MLP 256, 32 px with patch 4 (65 tokens)' from a unit's recorded shape."""
    shape = shape or {
        "hidden_size": 192,
        "num_hidden_layers": 12,
        "num_attention_heads": 3,
        "intermediate_size": 768,
        "image_size": 32,
        "patch_size": 4,
    }  # units written before shapes were recorded: ViT-tiny
    tokens = (shape["image_size"] // shape["patch_size"]) ** 2 + 1
    return (
        f"{shape['num_hidden_layers']} layers, dim {shape['hidden_size']}, {shape['num_attention_heads']} heads, "
        f"MLP {shape['intermediate_size']}, {shape['image_size']} px with patch {shape['patch_size']} "
        f"({tokens} tokens)"
    )


def accuracy(results: dict, links: str) -> str:
    acc = results["cifar10_accuracy"]
    n_test, vit = acc["test_images"] or 10000, next(iter(acc["units"].values()))
    p = statistics.fmean(by[ACCURACY.key]["mean"] for by in acc["summary"].values())
    chosen = results.get("lambda_sweep", {}).get("chosen")
    return fill(
        "accuracy",
        shape=vit_shape_text(acc.get("shape")),
        train_images=f"{vit['train_images']:,}",
        steps=f"{vit['steps']:,}",
        test_images=f"{'all ' if n_test == 10000 else 'a fixed subset of '}{n_test:,}",
        noise=f"{100 * math.sqrt(p * (1 - p) / n_test):.1f}",
        validated=fill("validated", chosen=f"{chosen:g}") if "neutreno-validated" in acc["names"] else "",
        figure=figure(
            acc,
            links,
            "CIFAR-10 learning curves",
            "Test accuracy after every epoch; the last point of each curve is the accuracy in the table",
        ),
        table=comparison(acc),
    )


def oversmoothing(results: dict, links: str) -> str:
    data, found = results["oversmoothing"], {c["id"]: c for c in results["claims"] if c["stats"] is not None}
    stages = []
    for stage, title in (("trained", "Trained"), ("init", "Random initialisation")):
        measures = [m for m in measures_of(data) if Measure.parse(m).stage == stage]
        last = found.get(f"cosine-{stage}", {}).get("stats")
        last_layer = (
            fill(
                "last-layer",
                title=title,
                delta=pm(last, 1, 3, True),
                wins=f"{last['wins']}/{last['n']}",
                per_seed=seeds(last, 1, 3),
            )
            if last
            else ""
        )
        stages.append(
            fill(
                "oversmoothing-stage",
                title=title,
                table=comparison(data, measures, per_seed=False),
                figure=f"![{title}]({links}/{data['figures'][stage]})" if data["figures"][stage] else "",
                last_layer=last_layer,
            )
        )
    return fill(
        "oversmoothing", samples=results["cifar10_accuracy"]["samples"]["oversmoothing"], stages="\n\n".join(stages)
    )


def efficiency(results: dict, links: str) -> str:
    data = results["data_efficiency"]
    return fill(
        "efficiency",
        table=comparison(data),
        fractions=", ".join(
            f"{key.rsplit('-', 1)[1]} % = {u['train_images']} images / {u['steps']} steps"
            for key, u in data["units"].items()
            if key.startswith("vit-") and not key.startswith("vit--")
        ),
    )


def corruptions(results: dict, links: str) -> str:
    data = results["corruptions"]
    measures = {m: Measure.parse(m) for m in measures_of(data)}
    overall = [m for m, measure in measures.items() if measure.corruption is None]  # the mean, by severity
    each = [m for m, measure in measures.items() if measure.corruption is not None]  # each at severity 5
    paper = [[f"paper {data['names'][k]}"] + [f"{x:.2f}" for x in PAPER_CORRUPTIONS[k]] + ["—"] for k in data["names"]]
    return fill(
        "corruptions",
        images=results["cifar10_accuracy"]["samples"]["corruption"],
        table=comparison(data, overall, extra=paper),
        per_corruption=comparison({**data, "paired": {}}, each, per_seed=False),
    )


def spectral(results: dict, links: str) -> str:
    data = results["spectral"]
    rows = []
    for stage, title in (("init", "random init"), ("trained", "trained")):
        for k, by in data["summary"].items():
            keys = [Measure("spectral", stage, category=c).key for c in ("smoothing", "sharpening", "other", "tie")]
            if keys[0] in by:
                stats = [by[key] for key in keys]
                rows.append(
                    [f"{title} {data['names'][k]}", pm(stats[0], 100), seeds(stats[0], 100, 1)]
                    + [pm(s, 100) for s in stats[1:]]
                    + [PAPER_SMOOTHING.get(f"{stage} {k}", "—")]
                )
    head = ["model", "smoothing", "smoothing per seed", "sharpening", "other", "tie", "paper (smoothing)"]
    return fill("spectral", samples=results["cifar10_accuracy"]["samples"]["spectral"], table=table(head, rows))


def parents_table(parents: dict, links: str) -> str:
    """The kept trained ViTs: each seed's retrained accuracy beside the first run's, and the folders."""
    rows = []
    for key, p in parents.items():
        first, diff = (p[k]["per_seed"] if p[k] else {} for k in ("first_run", "difference"))
        for seed, value in p["retrain"]["per_seed"].items():
            folder = p["model_dir"].get(seed)
            rows.append(
                [
                    f"{CIFAR_MODELS[key][1]}, seed {seed}",
                    f"{100 * value:.2f}",
                    f"{100 * first[seed]:.2f}" if seed in first else "—",
                    f"{100 * diff[seed]:+.2f}" if seed in diff else "—",
                    f"[{folder}]({links}/{folder})" if folder else "—",
                ]
            )
        spread = f"mean \\|Δ\\| {100 * statistics.fmean(map(abs, diff.values())):.2f}" if diff else ""
        rows.append(
            [
                f"{CIFAR_MODELS[key][1]}, over seeds",
                pm(p["retrain"], 100),
                pm(p["first_run"], 100) if first else "—",
                f"{delta(p['difference'])}; {spread}" if diff else "—",
                "",
            ]
        )
    head = [
        "model",
        "test accuracy (%), retrained",
        "first run, same seed",
        "retrained − first run (pp)",
        "model folder",
    ]
    return fill(
        "parents",
        seeds=", ".join(dict.fromkeys(s for p in parents.values() for s in p["retrain"]["per_seed"])),
        table=table(head, rows),
    )


def round_two(results: dict, links: str) -> str:
    """The λ sweep, the kept trained ViTs, adaptation, kernel attention and segmentation: each where it has units."""
    parts, chosen = [], results.get("lambda_sweep", {}).get("chosen")
    if sweep := results.get("lambda_sweep"):
        names = {**sweep["names"], **({f"{chosen:g}": f"λ {chosen:g} (chosen)"} if chosen is not None else {})}
        parts.append(
            fill(
                "lambda-sweep",
                train_images=f"{next(iter(sweep['units'].values()))['train_images']:,}",
                choice=fill("choice-none")
                if chosen is None
                else fill("choice-official" if chosen == VIT_LAMBDA else "choice-other", chosen=f"{chosen:g}"),
                table=comparison({**sweep, "names": names}),
                figure=figure(sweep, links, "λ sweep", "Validation accuracy after every epoch"),
            )
        )
    if parents := results.get("parents"):
        parts.append(parents_table(parents, links))
    for name, alt, caption in (
        ("adaptation", "Adaptation learning curves", "Test accuracy after every epoch of the continued training"),
        ("kernel", "Kernel attention learning curves", "Test accuracy after every epoch"),
        ("segmentation", "Segmentation learning curves", "The segmentation models during training"),
    ):
        if data := results.get(name):
            steps = next(iter(data["units"].values())).get("steps", "?")
            parts.append(
                fill(
                    name,
                    table=comparison(data),
                    steps=steps,
                    lam="?" if chosen is None else f"{chosen:g}",
                    figure=figure(data, links, alt, caption),
                )
            )
    return "\n\n".join(parts)


def unigram_reference(wt: dict) -> tuple[list, str]:
    """The unigram level as a table row (none without it) and the sentence that reads the softmax LM against it."""
    unigram = wt.get("unigram_perplexity")
    if not unigram:
        return [], ""
    protocols = [(split, protocol) for split in ("validation", "test") for protocol in ("sliding", "blocks")]
    extra = [["unigram of the training split (no context)"] + [f"{unigram[s][p]:.1f}" for s, p in protocols]]
    softmax = wt["summary"].get("softmax", {}).get(Measure("ppl", split="validation", protocol="blocks").key)
    if not softmax:
        return extra, ""
    level = unigram["validation"]["blocks"]
    ratio = f"{softmax['mean'] / level:.2f}"
    return extra, fill("unigram", softmax=pm(softmax, 1, 1), ratio=ratio, level=f"{level:.1f}")


def wikitext(results: dict, links: str) -> str:
    wt = results["wikitext2"]
    shape = wt.get("shape") or {
        "num_hidden_layers": 16,
        "hidden_size": 128,
        "num_attention_heads": 8,
        "intermediate_size": 2048,
    }
    extra, unigram = unigram_reference(wt)
    early = "; ".join(
        f"{LM_MODELS[k][1]}: best at steps {' / '.join(map(str, e['best_step'].values()))} of "
        f"{' / '.join(map(str, e['steps'].values()))} trained"
        for k, e in wt.get("early_stopping", {}).items()
    )
    slide, block, ffn = (
        wt["scored_tokens"]["validation"]["sliding"],
        wt["scored_tokens"]["validation"]["blocks"],
        shape["intermediate_size"],
    )
    curve = (
        ""
        if not wt.get("curve_tokens")
        else figure(
            wt,
            links,
            "WikiText-2 learning curves",
            "Validation perplexity during training, on non-overlapping blocks "
            f"of the first {wt['curve_tokens'] + 1:,} validation tokens",
        )
    )
    return fill(
        "wikitext",
        others="" if set(wt["names"]) <= {"softmax", "neutreno"} else ", and the value paths",
        layers=shape["num_hidden_layers"],
        hidden=shape["hidden_size"],
        heads=shape["num_attention_heads"],
        ffn=f"{ffn}{'' if ffn == 2048 else ' instead of 2048'}",
        context=wt["context"],
        norm="pre-LN instead of post-LN" if shape.get("norm_position") == "pre" else "post-LN",
        vocab=wt["vocab_size"],
        parameters=f"{wt['parameters'] / 1e6:.1f}M",
        steps=wt["steps"],
        batch=wt["batch_size"],
        train_tokens=f"{wt['train_tokens']:,}",
        epochs=f"{wt['train_tokens'] / 2088628:.2f}",
        warmup=wt["warmup_steps"],
        lr=f"{wt['learning_rate']:g}",
        slide_prefix=slide + 1,
        slide=slide,
        validation_tokens=f"{wt['split_tokens']['validation']:,}",
        block_prefix=block + 1,
        table=comparison(wt, extra=extra),
        figure=curve,
        early=fill("early", runs=early) if early else "",
        unigram=unigram,
        losses=", ".join(f"{wt['names'].get(k, k)} {pm(s, 1, 3)}" for k, s in wt["train_loss"].items()),
    )


SECTIONS = (
    ("cifar10_accuracy", accuracy),
    ("oversmoothing", oversmoothing),
    ("data_efficiency", efficiency),
    ("corruptions", corruptions),
    ("spectral", spectral),
    (None, round_two),
    ("wikitext2", wikitext),
)
