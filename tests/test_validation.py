"""Config and input validation (issue 13): the inputs that used to pass silently, and one set of config rules that
runs at construction, in `config.validate()`, in `save_pretrained`, in `from_pretrained` and when a model is built."""

import json
import math
import re

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError

import hf_neutreno
from hf_neutreno.models import neutreno_common

VIT = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64, image_size=16,
           patch_size=4, num_labels=3)
GPT = dict(vocab_size=97, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64,
           max_position_embeddings=64, embedding_dropout=0.0, hidden_dropout=0.0, activation_dropout=0.0,
           output_dropout=0.0, pad_token_id=0)
# model type: (config class, model class, small fields)
MODELS = {
    "neutreno_vit": (hf_neutreno.NeuTRENOViTConfig, hf_neutreno.NeuTRENOViTForImageClassification, VIT),
    "eigen_vit": (hf_neutreno.EigenViTConfig, hf_neutreno.EigenViTForImageClassification, VIT),
    "neutreno_gpt": (hf_neutreno.NeuTRENOGPTConfig, hf_neutreno.NeuTRENOGPTForCausalLM, GPT),
}
NON_FINITE = [float("nan"), float("inf"), float("-inf")]


def small(name: str, **overrides):
    config_class, _, fields = MODELS[name]
    return config_class(**{**fields, **overrides})


# --- configs: non-finite values ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("value", NON_FINITE, ids=str)
def test_non_finite_neutreno_lambda_is_rejected_naming_the_field(name, value):
    with pytest.raises(ValueError, match=r"`neutreno_lambda` must be a finite float >= 0"):
        small(name, neutreno_lambda=value)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(eigenvalue_range=[float("-inf"), 0.0]),
        dict(eigenvalue_range=[-1.0, float("inf")]),
        dict(eigenvalue_range=[float("nan"), 0.0]),
        dict(spectrum_sign="positive", eigenvalue_range=[0.0, float("inf")]),
        dict(spectrum_sign="positive", eigenvalue_range=[float("nan"), float("nan")]),
    ],
    ids=str,
)
def test_non_finite_eigenvalue_range_is_rejected_naming_the_field(overrides):
    with pytest.raises(ValueError, match=r"`eigenvalue_range` must be a list \[low, high\] of two finite floats"):
        small("eigen_vit", **overrides)


@pytest.mark.parametrize("value", NON_FINITE, ids=str)
def test_non_finite_eigenvalue_init_is_rejected_naming_the_field(value):
    with pytest.raises(ValueError, match=r"`eigenvalue_init` must be a finite float > 0"):
        small("eigen_vit", eigenvalue_init=value)


# --- configs: one set of rules, wherever it runs --------------------------------------------------------------------


@pytest.mark.parametrize("value", [-1, float("nan")], ids=str)
@pytest.mark.parametrize("name", MODELS)
def test_a_config_edited_after_construction_is_caught_everywhere_with_the_same_message(name, value, tmp_path):
    _, model_class, _ = MODELS[name]
    config = small(name)
    config.neutreno_lambda = value  # the annotation allows any int or float: the value rule is `validate_neutreno`
    with pytest.raises(ValueError, match="neutreno_lambda") as by_validate:
        config.validate()
    with pytest.raises(ValueError) as by_save:
        config.save_pretrained(tmp_path / "config")
    with pytest.raises(ValueError) as by_model:
        model_class(config)
    model = model_class(small(name))
    model.config.neutreno_lambda = value
    with pytest.raises(ValueError) as by_model_save:
        model.save_pretrained(tmp_path / "model")
    messages = {str(error.value) for error in (by_validate, by_save, by_model_save, by_model)}
    assert messages == {str(by_validate.value)}
    # Nothing written at all: the models check the config before transformers copies their code into the folder.
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("name", MODELS)
def test_an_invalid_config_leaves_a_saved_model_as_it_was(name, tmp_path):
    _, model_class, _ = MODELS[name]
    model_class(small(name)).save_pretrained(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    model = model_class(small(name))
    model.config.neutreno_lambda = float("inf")
    with pytest.raises(ValueError, match="neutreno_lambda"):
        model.save_pretrained(tmp_path)
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize("name", MODELS)
def test_a_layer_list_edited_in_place_is_caught_by_validate(name):
    config = small(name, neutreno_layers=[1, 2])
    config.neutreno_layers.append(0)  # no assignment, so no type check: the class validator still sees it
    with pytest.raises(ValueError, match="`neutreno_layers` cannot contain 0"):
        config.validate()


@pytest.mark.parametrize("name", MODELS)
def test_a_bad_value_in_config_json_is_rejected_by_from_pretrained(name, tmp_path):
    config_class = MODELS[name][0]
    small(name).save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    fields = json.loads(path.read_text())
    fields["neutreno_lambda"] = math.inf  # written as `Infinity`, which Python's json reads back
    path.write_text(json.dumps(fields))
    with pytest.raises(ValueError, match="`neutreno_lambda` must be a finite float >= 0"):
        config_class.from_pretrained(tmp_path)


@pytest.mark.parametrize("name", MODELS)
def test_each_rule_runs_once_at_construction_and_once_when_a_model_is_built(name, monkeypatch):
    """`validate_neutreno` ends by checking `neutreno_layers`: count those checks."""
    _, model_class, _ = MODELS[name]
    calls, check = [], neutreno_common.check_layer_indices

    def counting_check(field, *args, **kwargs):
        calls.append(field)
        check(field, *args, **kwargs)

    monkeypatch.setattr(neutreno_common, "check_layer_indices", counting_check)
    config = small(name)
    assert calls.count("neutreno_layers") == 1
    model_class(config)
    assert calls.count("neutreno_layers") == 2


@pytest.mark.parametrize("name", MODELS)
def test_a_wrong_type_is_rejected_on_assignment_naming_the_field(name):
    config = small(name)
    with pytest.raises(ValueError, match="neutreno_lambda") as error:
        config.neutreno_lambda = "0.5"
    assert isinstance(error.value, StrictDataclassError)  # what transformers 5 callers catch
    with pytest.raises(ValueError, match="neutreno_layers"):
        small(name, neutreno_layers=[1.5])
    assert config.neutreno_lambda == MODELS[name][0]().neutreno_lambda  # the bad assignment left nothing behind


def test_integers_and_tuples_are_still_accepted_where_they_were():
    config = small("eigen_vit", neutreno_lambda=1, eigenvalue_init=1, eigenvalue_range=(-2, 0), hidden_dropout_prob=0)
    assert config.eigenvalue_range == [-2, 0] and config.neutreno_lambda == 1
    assert small("neutreno_vit", image_size=(16, 8), patch_size=[4, 4]).image_size_2d == (16, 8)


# --- inputs: pixel_values ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["neutreno_vit", "eigen_vit"])
@pytest.mark.parametrize("shape", [(3, 16, 16), (1, 1, 3, 16, 16), (16,)], ids=str)
def test_pixel_values_that_are_not_4d_raise_naming_the_expected_shape(name, shape):
    model = MODELS[name][1](small(name)).eval()
    expected = re.escape(f"(batch, num_channels, height, width), here (batch, 3, 16, 16); got {shape}")
    with pytest.raises(ValueError, match=expected):
        model(torch.randn(shape))


@pytest.mark.parametrize("name", ["neutreno_vit", "eigen_vit"])
def test_pixel_values_channel_and_size_checks_remain(name):
    model = MODELS[name][1](small(name)).eval()
    with pytest.raises(ValueError, match="num_channels"):
        model(torch.randn(1, 1, 16, 16))
    with pytest.raises(ValueError, match="image_size"):
        model(torch.randn(1, 3, 20, 20))
    assert model(torch.randn(2, 3, 16, 16)).logits.shape == (2, 3)


# --- inputs: the GPT's attention mask ------------------------------------------------------------------------------


def gpt() -> hf_neutreno.NeuTRENOGPTForCausalLM:
    torch.manual_seed(0)
    return hf_neutreno.NeuTRENOGPTForCausalLM(small("neutreno_gpt", neutreno_lambda=0.4)).eval()


def token_ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, GPT["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    "mask_shape", [(1, 5), (1, 2), (2, 3), (3,), (1, 1, 3)], ids=["longer", "shorter", "batch", "1-d", "3-d"]
)
def test_a_mask_that_does_not_match_the_inputs_raises_naming_both_shapes(mask_shape):
    expected = re.escape(f"`attention_mask` has shape {mask_shape}") + ".*" + re.escape("= (1, 3)")
    with pytest.raises(ValueError, match=expected):
        gpt()(token_ids(1, 3), attention_mask=torch.ones(mask_shape, dtype=torch.long))


def test_with_a_cache_the_mask_must_cover_the_cached_tokens_too():
    model = gpt()
    ids = token_ids(2, 6)
    with torch.no_grad():
        full = model(ids, use_cache=False).logits
        cache = model(ids[:, :4], use_cache=True).past_key_values
        with pytest.raises(ValueError, match=r"has shape \(2, 2\).*= \(2, 6\) \(4 cached and 2 new tokens\)"):
            model(ids[:, 4:], attention_mask=torch.ones(2, 2), past_key_values=cache)
        assert cache.get_seq_length() == 4  # the rejected call added nothing to the cache
        step = model(ids[:, 4:], attention_mask=torch.ones(2, 6), past_key_values=cache).logits
    assert (step - full[:, 4:]).abs().max().item() <= 1e-5


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_grows_a_left_padded_mask_and_matches_greedy_full_forwards(use_cache):
    """Reference: greedy decoding by hand, one full forward per new token (no cache), the mask grown by hand."""
    model = gpt()
    ids = token_ids(3, 7, seed=1)
    mask = torch.ones_like(ids)
    mask[1, :3] = mask[2, :5] = 0
    ids = ids.masked_fill(mask == 0, 0)
    with torch.no_grad():
        generated = model.generate(
            ids, attention_mask=mask, max_new_tokens=5, min_new_tokens=5, do_sample=False, use_cache=use_cache
        )
        expected, grown = ids, mask
        for _ in range(5):
            next_token = model(expected, attention_mask=grown, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            expected = torch.cat([expected, next_token], dim=1)
            grown = torch.cat([grown, torch.ones_like(next_token)], dim=1)
    assert torch.equal(generated, expected)


# ======================================================================================================================
# Output folders, resumption and dataset checks of `hf-neutreno compare` and the example scripts: each bad input is
# refused before anything trains or is written, with a message naming the flag or path.

import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import transformers  # noqa: E402
from examples_loader import load_example  # noqa: E402

from hf_neutreno import cli  # noqa: E402

EXAMPLE_SCRIPTS = ("run_image_classification", "run_clm_wikitext103", "run_semantic_segmentation", "run_eigen_vit")
COMPARE_TINY = ["--max-steps", "2", "--max-train-samples", "16", "--max-eval-samples", "8", "--probe-samples", "4",
                "--batch-size", "8", "--no-progress"]


@pytest.fixture
def no_training(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(transformers.Trainer, "train", refuse)


def _compare_error(argv: list[str], capsys) -> str:
    """Run `hf-neutreno compare` as the console script does; return its one-line error (exit status 2)."""
    capsys.readouterr()
    assert cli.main(["compare", *argv]) == 2
    message = capsys.readouterr().err
    assert message.count("\n") == 1 and message.startswith("hf-neutreno compare: error: "), message
    return message


def _finished_model(folder: Path) -> Path:
    """What a finished run leaves in its output folder: a saved model (and its results)."""
    small("neutreno_vit").save_pretrained(folder)  # any model: the scripts only look at what the folder holds
    (folder / "all_results.json").write_text("{}")
    return folder


def test_compare_refuses_a_segmentation_folder_without_id2label(data_dir, tmp_path, capsys, no_training):
    folder = tmp_path / "scenes"
    folder.mkdir()
    for split in ("train", "validation"):
        shutil.copy(data_dir / "fashion-scenes" / f"{split}-00000-of-00001.parquet", folder)
    message = _compare_error(["--model", "segmenter-micro", "--dataset", str(folder), "--output-dir",
                              str(tmp_path / "out"), *COMPARE_TINY], capsys)
    assert f"--dataset {str(folder)!r} has no id2label.json" in message and str(folder / "id2label.json") in message
    assert "not guessed" in message and not (tmp_path / "out").exists()


def test_compare_resume_refuses_other_settings_naming_them(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    step = transformers.Trainer.training_step

    def interrupt_neutreno(self, model, *args, **kwargs):
        if model.config.neutreno_lambda > 0:
            raise KeyboardInterrupt
        return step(self, model, *args, **kwargs)

    monkeypatch.setattr(transformers.Trainer, "training_step", interrupt_neutreno)
    assert cli.main(["compare", "--output-dir", str(out), "--seeds", "1", *COMPARE_TINY]) == 130
    monkeypatch.undo()
    work = tmp_path / "run.incomplete"
    before = (work / "results.json").read_text()
    message = _compare_error(["--output-dir", str(out), "--seeds", "1", *COMPARE_TINY[:-1], "--batch-size", "4",
                              "--no-progress", "--resume"], capsys)
    assert "--resume" in message and str(work) in message and "--batch-size 8 (now 4)" in message
    assert (work / "results.json").read_text() == before and not out.exists()


def test_compare_refuses_a_folder_beside_the_output_that_is_not_a_compare_run(tmp_path, capsys, no_training):
    (tmp_path / "run.incomplete").mkdir()
    (tmp_path / "run.incomplete" / "notes.txt").write_text("mine")
    message = _compare_error(["--output-dir", str(tmp_path / "run"), *COMPARE_TINY], capsys)
    assert str(tmp_path / "run.incomplete") in message and "notes.txt" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.incomplete"]


def _example_args(script: str, data_dir: Path, output_dir: Path) -> list[str]:
    if script == "run_clm_wikitext103":
        return ["--dataset-name", str(data_dir / "wikitext-2-v1"), "--output-dir", str(output_dir)]
    if script == "run_semantic_segmentation":
        return ["--dataset-name", str(data_dir / "fashion-scenes"), "--output-dir", str(output_dir)]
    if script == "run_eigen_vit":
        return ["--dataset", str(data_dir / "cifar10"), "--output-dir", str(output_dir), "--quick"]
    return ["--dataset-name", str(data_dir / "fashion_mnist"), "--output-dir", str(output_dir)]


@pytest.mark.parametrize("script", EXAMPLE_SCRIPTS)
def test_each_example_refuses_to_overwrite_a_finished_run(script, data_dir, tmp_path, no_training):
    output_dir = _finished_model(tmp_path / "run")
    before = sorted(p.name for p in output_dir.iterdir())
    with pytest.raises(ValueError, match=r"--output-dir .* already holds .*--resume-from-checkpoint.*"
                       r"--overwrite-output-dir") as error:
        load_example(script).main(_example_args(script, data_dir, output_dir))
    assert str(output_dir) in str(error.value)
    assert sorted(p.name for p in output_dir.iterdir()) == before


@pytest.mark.parametrize("script", EXAMPLE_SCRIPTS[:3])
@pytest.mark.parametrize("spelling", [[], ["true"]], ids=["no path", "true"])
def test_resuming_without_a_checkpoint_names_the_flag_and_the_folder(script, spelling, data_dir, tmp_path,
                                                                      no_training):
    output_dir = tmp_path / "run"
    argv = _example_args(script, data_dir, output_dir) + ["--resume-from-checkpoint", *spelling]
    with pytest.raises(ValueError, match=r"--resume-from-checkpoint: --output-dir .* holds no checkpoint-\* folder"):
        load_example(script).main(argv)
    assert not output_dir.exists()


@pytest.mark.parametrize("script", EXAMPLE_SCRIPTS[:3])
def test_resuming_from_a_folder_that_is_no_checkpoint_names_it(script, data_dir, tmp_path, no_training):
    folder = _finished_model(tmp_path / "model")  # a saved model, not a Trainer checkpoint
    argv = _example_args(script, data_dir, tmp_path / "run") + ["--resume-from-checkpoint", str(folder)]
    with pytest.raises(ValueError, match=rf"--resume-from-checkpoint '{folder}' is not a checkpoint folder"):
        load_example(script).main(argv)


def test_eigen_example_resumes_only_its_own_interrupted_run(data_dir, tmp_path, no_training):
    example = load_example("run_eigen_vit")
    with pytest.raises(ValueError, match=r"--resume-from-checkpoint '.*ckpt': this script takes no path"):
        example.main(_example_args("run_eigen_vit", data_dir, tmp_path / "run") + ["--resume-from-checkpoint",
                                                                                  str(tmp_path / "ckpt")])
    with pytest.raises(ValueError, match=r"--resume-from-checkpoint: --output-dir .* holds no interrupted run"):
        example.main(_example_args("run_eigen_vit", data_dir, tmp_path / "run") + ["--resume-from-checkpoint"])
    assert not (tmp_path / "run").exists()

# ======================================================================================================================
