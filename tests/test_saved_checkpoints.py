"""Checkpoints users already hold keep loading and computing the same outputs.

The model files were rewritten after commit 8990f36. A fixture makes tiny checkpoints the way a user of that version
did: it takes that commit's model files from the repository's git history, imports them in a process where
`hf_neutreno` cannot be imported, builds six small models (two ViT classifiers, one with the symmetric, FeatScale and
linear-kernel ablations; a Segmenter; an EigenViT; two GPTs, plain and adaptive softmax), saves them with
`save_pretrained` (which copies that version's code files beside the weights) and records the outputs that code
computed. Today's code must load them with the package, with their own code (`trust_remote_code`, no package), and
after a re-save, keeping their config fields and outputs.
"""

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoModelForImageClassification, AutoModelForSemanticSegmentation

from fresh_process import run_fresh
from hf_neutreno import (
    EigenViTForImageClassification,
    NeuTRENOGPTForCausalLM,
    NeuTRENOViTForImageClassification,
    NeuTRENOViTForSemanticSegmentation,
)

EARLIER_COMMIT = "8990f366ba0c3ea55d240329795a6507705174e1"  # the last version before the model files were rewritten
EARLIER_FILES = (
    "neutreno_common.py",
    "configuration_neutreno_vit.py",
    "modeling_neutreno_vit.py",
    "configuration_eigen_vit.py",
    "modeling_eigen_vit.py",
    "configuration_neutreno_gpt.py",
    "modeling_neutreno_gpt.py",
)
# folder: (package class, Auto class)
CHECKPOINTS = {
    "neutreno-vit": (NeuTRENOViTForImageClassification, AutoModelForImageClassification),
    "neutreno-vit-ablations": (NeuTRENOViTForImageClassification, AutoModelForImageClassification),
    "neutreno-segmenter": (NeuTRENOViTForSemanticSegmentation, AutoModelForSemanticSegmentation),
    "eigen-vit": (EigenViTForImageClassification, AutoModelForImageClassification),
    "neutreno-gpt": (NeuTRENOGPTForCausalLM, AutoModelForCausalLM),
    "neutreno-gpt-adaptive": (NeuTRENOGPTForCausalLM, AutoModelForCausalLM),
}
TOL = 1e-5  # fp32 kernel-order noise; the weights and the function are the same

# Runs in a process without hf_neutreno, after `CODE` (the folder holding the earlier model files as the package
# `earlier_models`) and `ROOT` (where to save) are set.
BUILD_EARLIER_CHECKPOINTS = textwrap.dedent("""
    import sys
    from pathlib import Path

    import torch
    import transformers
    from safetensors.torch import save_file

    root = Path(ROOT)
    sys.path.insert(0, CODE)
    from earlier_models.configuration_eigen_vit import EigenViTConfig
    from earlier_models.configuration_neutreno_gpt import NeuTRENOGPTConfig
    from earlier_models.configuration_neutreno_vit import NeuTRENOViTConfig
    from earlier_models.modeling_eigen_vit import EigenViTForImageClassification, EigenViTModel
    from earlier_models.modeling_neutreno_gpt import NeuTRENOGPTForCausalLM, NeuTRENOGPTModel
    from earlier_models.modeling_neutreno_vit import (
        NeuTRENOViTForImageClassification, NeuTRENOViTForSemanticSegmentation, NeuTRENOViTModel,
    )

    # What that version's hf_neutreno/__init__.py registered: save_pretrained then copies the code files and writes
    # config.auto_map, naming the files by their module's last part (modeling_neutreno_vit.NeuTRENOViTModel).
    REGISTRY = [
        (NeuTRENOViTConfig, {"AutoModel": NeuTRENOViTModel,
                             "AutoModelForImageClassification": NeuTRENOViTForImageClassification,
                             "AutoModelForSemanticSegmentation": NeuTRENOViTForSemanticSegmentation}),
        (EigenViTConfig, {"AutoModel": EigenViTModel,
                          "AutoModelForImageClassification": EigenViTForImageClassification}),
        (NeuTRENOGPTConfig, {"AutoModel": NeuTRENOGPTModel, "AutoModelForCausalLM": NeuTRENOGPTForCausalLM}),
    ]
    for config_class, models in REGISTRY:
        config_class.register_for_auto_class()
        for auto_class, model_class in models.items():
            model_class.register_for_auto_class(auto_class)

    VIT = dict(hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32, image_size=8,
               patch_size=4, num_labels=3)
    GPT = dict(vocab_size=50, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32,
               max_position_embeddings=32, pad_token_id=0, eos_token_id=1, bos_token_id=1)


    def randomise(model):
        # Non-trivial values in every parameter (zero-initialised ones such as FeatScale's would test nothing).
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("psi"):  # eigenvalue magnitudes, kept inside the configured range
                    param.uniform_(0.2, 0.9, generator=generator)
                elif "theta" not in name:
                    param.add_(torch.randn(param.shape, generator=generator) * 0.2)


    def save(name, model_class, config, inputs):
        torch.manual_seed(0)
        model = model_class(config).eval()
        assert type(model).__module__.startswith("earlier_models."), type(model).__module__
        randomise(model)
        model.save_pretrained(root / name)
        with torch.no_grad():
            expected = {**inputs, "logits": model(*inputs.values()).logits.contiguous()}
            if "input_ids" in inputs:
                ids = inputs["input_ids"]
                expected["generated"] = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6,
                                                       min_new_tokens=6, do_sample=False)
        save_file(expected, root / f"{name}.expected.safetensors")


    pixels = {"pixel_values": torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))}
    save("neutreno-vit", NeuTRENOViTForImageClassification,
         NeuTRENOViTConfig(**VIT, neutreno_lambda=0.6, use_distillation_token=True, pooling="mean"), pixels)
    save("neutreno-vit-ablations", NeuTRENOViTForImageClassification,
         NeuTRENOViTConfig(**VIT, neutreno_lambda=0.5, neutreno_layers=[2], symmetric_attention=True, featscale=True,
                           attention_kernel="linear"), pixels)
    save("neutreno-segmenter", NeuTRENOViTForSemanticSegmentation,
         NeuTRENOViTConfig(**{**VIT, "num_labels": 4}, neutreno_lambda=0.6, decoder_hidden_size=12,
                           decoder_num_attention_heads=3, decoder_neutreno_lambda=0.3, decoder_dropout=0.0), pixels)
    save("eigen-vit", EigenViTForImageClassification,
         EigenViTConfig(**VIT, neutreno_lambda=0.2, spectrum_sign="negative", eigenvalue_range=[-1.0, 0.0],
                        eigen_layers=[0, 2]), pixels)
    ids = {"input_ids": torch.randint(2, GPT["vocab_size"], (2, 6), generator=torch.Generator().manual_seed(2))}
    save("neutreno-gpt", NeuTRENOGPTForCausalLM,
         NeuTRENOGPTConfig(**GPT, neutreno_lambda=0.4, norm_position="pre", position_embedding_type="learned",
                           scale_embeddings=False, lm_head_bias=False, attention_bias=True), ids)
    save("neutreno-gpt-adaptive", NeuTRENOGPTForCausalLM,
         NeuTRENOGPTConfig(**GPT, neutreno_lambda=0.4, neutreno_layers=[1, 2], adaptive_softmax_cutoffs=[10, 30]), ids)
""")


def earlier_model_files() -> dict[str, str]:
    """The model files of `EARLIER_COMMIT`, read from the repository's git history."""
    tests = Path(__file__).resolve().parent
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=tests, capture_output=True, text=True, check=True
        ).stdout.strip()
        return {
            name: subprocess.run(
                ["git", "show", f"{EARLIER_COMMIT}:src/hf_neutreno/models/{name}"],
                cwd=top,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            for name in EARLIER_FILES
        }
    except (OSError, subprocess.CalledProcessError) as error:
        detail = (getattr(error, "stderr", None) or str(error)).strip()
        pytest.fail(
            f"These tests need the repository's git history: they build checkpoints with the model files of commit "
            f"{EARLIER_COMMIT[:7]} (`git show {EARLIER_COMMIT[:7]}:src/hf_neutreno/models/<file>`), so they must run "
            f"in a git clone that holds that commit (a full clone; not a shallow clone or a source archive). "
            f"git said: {detail}",
            pytrace=False,
        )


@pytest.fixture(scope="module")
def earlier_checkpoints(tmp_path_factory) -> Path:
    """Folders saved by `save_pretrained` of the earlier version, and `<name>.expected.safetensors` beside them."""
    work = tmp_path_factory.mktemp("earlier_checkpoints")
    package = work / "code" / "earlier_models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name, source in earlier_model_files().items():
        (package / name).write_text(source)
    root = work / "checkpoints"
    root.mkdir()
    run_fresh(f"CODE, ROOT = {str(package.parent)!r}, {str(root)!r}\n" + BUILD_EARLIER_CHECKPOINTS, work)
    return root


def outputs(model, expected: dict) -> dict:
    with torch.no_grad():
        if "input_ids" in expected:
            ids = expected["input_ids"]
            generated = model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, min_new_tokens=6, do_sample=False
            )
            return {"logits": model(ids).logits, "generated": generated}
        return {"logits": model(expected["pixel_values"]).logits}


def assert_same(got: dict, expected: dict) -> None:
    torch.testing.assert_close(got["logits"], expected["logits"], atol=TOL, rtol=0)
    if "generated" in expected:
        assert torch.equal(got["generated"], expected["generated"])


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_a_checkpoint_saved_by_an_earlier_version_loads_with_the_package(name, earlier_checkpoints):
    model_class, _ = CHECKPOINTS[name]
    model, info = model_class.from_pretrained(earlier_checkpoints / name, output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched weights
    expected = load_file(earlier_checkpoints / f"{name}.expected.safetensors")
    assert_same(outputs(model.eval(), expected), expected)


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_a_checkpoint_resaved_by_this_version_keeps_its_config_fields_and_outputs(name, earlier_checkpoints, tmp_path):
    model_class, _ = CHECKPOINTS[name]
    model_class.from_pretrained(earlier_checkpoints / name).save_pretrained(tmp_path)
    old = json.loads((earlier_checkpoints / name / "config.json").read_text())
    new = json.loads((tmp_path / "config.json").read_text())
    ignored = {"transformers_version"}
    assert {k: v for k, v in new.items() if k not in ignored} == {k: v for k, v in old.items() if k not in ignored}
    expected = load_file(earlier_checkpoints / f"{name}.expected.safetensors")
    assert_same(outputs(model_class.from_pretrained(tmp_path).eval(), expected), expected)


def test_saved_checkpoints_load_without_the_package_with_old_and_new_code(earlier_checkpoints, tmp_path):
    """A user without the package: each folder with its own (earlier) code, and re-saved with today's code."""
    folders = {}
    for name, (model_class, _) in CHECKPOINTS.items():
        folders[f"{name} (its code)"] = earlier_checkpoints / name
        model_class.from_pretrained(earlier_checkpoints / name).save_pretrained(tmp_path / name)
        folders[f"{name} (today's code)"] = tmp_path / name
    for label, folder in folders.items():
        # auto_map names flat sibling files saved beside the weights (`modeling_neutreno_vit.NeuTRENOViTModel`).
        auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
        for reference in auto_map.values():
            module, _ = reference.split(".")
            assert (folder / f"{module}.py").is_file(), (label, reference)
    auto = {name: auto_class.__name__ for name, (_, auto_class) in CHECKPOINTS.items()}
    jobs = {label: (str(folder), auto[label.split(" ")[0]]) for label, folder in folders.items()}
    out = run_fresh(
        f"""
        import json, torch, transformers
        from safetensors.torch import load_file
        jobs, root = {json.dumps(jobs)}, "{earlier_checkpoints}"
        report = {{}}
        for label, (folder, auto) in jobs.items():
            model = getattr(transformers, auto).from_pretrained(folder, trust_remote_code=True).eval()
            assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
            expected = load_file(root + "/" + label.split(" ")[0] + ".expected.safetensors")
            with torch.no_grad():
                if "input_ids" in expected:
                    ids = expected["input_ids"]
                    logits = model(ids).logits
                    generated = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6,
                                               min_new_tokens=6, do_sample=False)
                    same_tokens = bool(torch.equal(generated, expected["generated"]))
                else:
                    logits, same_tokens = model(expected["pixel_values"]).logits, True
            report[label] = [(logits - expected["logits"]).abs().max().item(), same_tokens]
        print(json.dumps(report))
    """,
        tmp_path,
    )
    report = json.loads(out.strip().splitlines()[-1])
    assert set(report) == set(folders)
    for label, (diff, same_tokens) in report.items():
        assert diff <= TOL and same_tokens, (label, diff, same_tokens)
