"""Config and input validation: the inputs that used to pass silently, and one set of config rules that runs at
construction, in `config.validate()`, in `save_pretrained` (before anything is written), in `from_pretrained` and when
a model is built."""

import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig

import hf_neutreno
from examples_loader import EXAMPLES, load_example
from hf_neutreno import cli
from tiny_models import TINY_NEUTRENO_GPT, TINY_VIT

VIT = dict(TINY_VIT, num_attention_heads=2, num_labels=3)
GPT = dict(TINY_NEUTRENO_GPT, num_hidden_layers=3)
SEGMENTER = dict(VIT, num_labels=11, decoder_hidden_size=16, decoder_num_attention_heads=2, decoder_dropout=0.0)
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
    with pytest.raises(StrictDataclassError, match=r"`neutreno_lambda` must be a finite float >= 0"):
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
    with pytest.raises(StrictDataclassError, match=r"`eigenvalue_range` must be a list \[low, high\] of two finite"):
        small("eigen_vit", **overrides)


@pytest.mark.parametrize("value", NON_FINITE, ids=str)
def test_non_finite_eigenvalue_init_is_rejected_naming_the_field(value):
    with pytest.raises(StrictDataclassError, match=r"`eigenvalue_init` must be a finite float > 0"):
        small("eigen_vit", eigenvalue_init=value)


# --- configs: a bad value is refused where it is written ------------------------------------------------------------


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf")], ids=str)
@pytest.mark.parametrize("name", MODELS)
def test_a_bad_value_assigned_after_construction_is_refused_and_nothing_is_written(name, value, tmp_path):
    """The field's rule runs on the assignment itself (`@strict`), so neither the config nor a model built from it
    ever holds the value, and nothing can save it."""
    _, model_class, _ = MODELS[name]
    config = small(name)
    with pytest.raises(StrictDataclassError, match="`neutreno_lambda` must be a finite float >= 0") as on_config:
        config.neutreno_lambda = value
    model = model_class(small(name))
    with pytest.raises(StrictDataclassError) as on_model_config:
        model.config.neutreno_lambda = value
    assert str(on_config.value) == str(on_model_config.value)
    assert config.neutreno_lambda == model.config.neutreno_lambda == small(name).neutreno_lambda  # left as it was
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("name", MODELS)
def test_a_model_saved_after_a_refused_edit_reloads_to_the_same_outputs(name, tmp_path):
    _, model_class, _ = MODELS[name]
    model = model_class(small(name)).eval()
    with pytest.raises(StrictDataclassError):
        model.config.neutreno_lambda = float("inf")
    model.save_pretrained(tmp_path)
    reloaded = model_class.from_pretrained(tmp_path).eval()
    inputs = torch.randn(2, 3, 16, 16) if "vit" in name else token_ids(2, 5)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(inputs).logits, model(inputs).logits, atol=0, rtol=0)


def files(folder) -> dict:
    """Every file under `folder` (relative path: bytes): a refused save must leave this unchanged."""
    return {path.relative_to(folder): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def earlier_save_and_empty_folder(model_class, config, tmp_path):
    """A folder holding an earlier save of the same kind of model, and an empty folder."""
    earlier, empty = tmp_path / "earlier", tmp_path / "empty"
    model_class(config).save_pretrained(earlier)
    empty.mkdir()
    return earlier, empty


@pytest.mark.parametrize(
    "name, edit, message",
    [
        ("neutreno_vit", lambda config: config.neutreno_layers.append(0), "`neutreno_layers` cannot contain 0"),
        (
            "neutreno_vit",
            lambda config: config.neutreno_layers.append(3),
            r"`neutreno_layers` entries must be integers in \[1, 2\] \(num_hidden_layers=3, 0-based\), got \[3\]",
        ),
        ("eigen_vit", lambda config: config.neutreno_layers.append(0), "`neutreno_layers` cannot contain 0"),
        (
            "eigen_vit",
            lambda config: config.neutreno_layers.append(3),
            r"`neutreno_layers` entries must be integers in \[1, 2\] \(num_hidden_layers=3, 0-based\), got \[3\]",
        ),
        ("neutreno_gpt", lambda config: config.neutreno_layers.append(0), "`neutreno_layers` cannot contain 0"),
        (
            "neutreno_gpt",
            lambda config: config.neutreno_layers.append(3),
            r"`neutreno_layers` entries must be integers in \[1, 2\] \(num_hidden_layers=3, 0-based\), got \[3\]",
        ),
    ],
    ids=[
        "vit in place",
        "vit beyond the layers",
        "eigen in place",
        "eigen beyond the layers",
        "gpt in place",
        "gpt beyond the layers",
    ],
)
def test_an_edit_breaking_a_rule_across_fields_is_refused_by_validate_build_and_save_writing_nothing(
    name, edit, message, tmp_path
):
    """A rule across fields (a layer list against `num_hidden_layers`) cannot run on one assignment, and an in-place
    edit of a list passes none: `validate()`, building a model and `save_pretrained` (the model's and the config's)
    run the rules, and a refused save writes nothing, not even the code files transformers copies first."""
    _, model_class, _ = MODELS[name]
    config = small(name, neutreno_layers=[1, 2])
    earlier, empty = earlier_save_and_empty_folder(model_class, config, tmp_path)
    before = files(earlier)
    model = model_class(config)
    edit(model.config)
    with pytest.raises(StrictDataclassError, match=message):
        model.config.validate()
    with pytest.raises(StrictDataclassError, match=message):
        model_class(model.config)
    for folder in (earlier, empty):
        with pytest.raises(StrictDataclassError, match=message):
            model.save_pretrained(folder)
        with pytest.raises(StrictDataclassError, match=message):
            model.config.save_pretrained(folder)
    assert files(earlier) == before
    assert files(empty) == {}


@pytest.mark.parametrize("name", MODELS)
def test_a_layer_past_the_last_is_refused_on_assignment_and_an_in_place_one_at_the_next_forward(name):
    """`neutreno_layers = [3]` on a built 3-layer model (layers 0-2) was accepted, and the model ran as the plain
    transformer (λ = 0 in every layer) until a save refused it. The assignment is refused, naming the field and the
    allowed range, and leaves the model as it was: its outputs are a model's built with `neutreno_layers=[2]`. An
    in-place edit of the list, which no assignment sees, is refused at the next forward."""
    _, model_class, _ = MODELS[name]
    torch.manual_seed(0)
    model = model_class(small(name, neutreno_lambda=0.6, neutreno_layers=[2])).eval()
    torch.manual_seed(0)
    reference = model_class(small(name, neutreno_lambda=0.6, neutreno_layers=[2])).eval()
    inputs = torch.randn(2, 3, 16, 16) if "vit" in name else token_ids(2, 5)
    message = r"`neutreno_layers` entries must be integers in \[1, 2\] \(num_hidden_layers=3, 0-based\), got \[3\]"
    with pytest.raises(StrictDataclassError, match=message):
        model.config.neutreno_layers = [3]
    assert model.config.neutreno_layers == [2]
    with torch.no_grad():
        torch.testing.assert_close(model(inputs).logits, reference(inputs).logits, atol=0, rtol=0)
    model.config.neutreno_layers.append(3)
    with pytest.raises(ValueError, match=message):
        model(inputs)
    if name == "eigen_vit":  # the other layer list: fixed when the model is built, range-checked on assignment
        with pytest.raises(StrictDataclassError, match=r"`eigen_layers` entries must be integers in \[0, 2\]"):
            model.config.eigen_layers = [0, 3]


@pytest.mark.parametrize("name", MODELS)
def test_a_layer_list_and_a_new_depth_given_together_load_in_any_order(name, tmp_path):
    """`from_pretrained(folder, neutreno_layers=[4], num_hidden_layers=5)` on a 3-layer checkpoint was refused:
    transformers sets the keyword arguments one by one in the caller's order, so the list was checked against the saved
    depth. Either order, through the config class, `AutoConfig` and `update`, gives the config built with both."""
    config_class, _, _ = MODELS[name]
    small(name).save_pretrained(tmp_path)
    lists = {"neutreno_layers": [4]} | ({"eigen_layers": [0, 4]} if name == "eigen_vit" else {})
    for fields in ({**lists, "num_hidden_layers": 5}, {"num_hidden_layers": 5, **lists}):
        for loaded in (
            config_class.from_pretrained(tmp_path, **fields),
            AutoConfig.from_pretrained(tmp_path, **fields),
        ):
            assert type(loaded) is config_class
            assert {key: getattr(loaded, key) for key in fields} == fields
        updated = small(name)
        updated.update(dict(fields))
        assert {key: getattr(updated, key) for key in fields} == fields
    with pytest.raises(StrictDataclassError, match=r"`neutreno_layers` entries must be integers in \[1, 2\]"):
        config_class.from_pretrained(tmp_path, neutreno_layers=[4])


@pytest.mark.parametrize("value", NON_FINITE, ids=str)
@pytest.mark.parametrize("name", MODELS)
def test_a_value_set_past_the_field_check_is_refused_by_validate_and_save_writing_nothing(name, value, tmp_path):
    """`object.__setattr__` skips the field's rule on assignment; `validate()` and both saves run it again, so a NaN
    λ is never written (json would write it as {"__float__": "NaN"})."""
    _, model_class, _ = MODELS[name]
    config = small(name)
    earlier, empty = earlier_save_and_empty_folder(model_class, config, tmp_path)
    before = files(earlier)
    model = model_class(config)
    object.__setattr__(model.config, "neutreno_lambda", value)
    message = r"`neutreno_lambda` must be a finite float >= 0 \(0 gives the plain transformer\), got " + re.escape(
        repr(value)
    )
    with pytest.raises(StrictDataclassError, match=message):
        model.config.validate()
    for folder in (earlier, empty):
        with pytest.raises(StrictDataclassError, match=message):
            model.config.save_pretrained(folder)
        with pytest.raises(StrictDataclassError, match=message):
            model.save_pretrained(folder)
    assert files(earlier) == before
    assert files(empty) == {}


def test_a_wrong_type_set_past_the_field_check_is_refused_at_save(tmp_path):
    config = small("neutreno_vit")
    object.__setattr__(config, "num_hidden_layers", "3")
    with pytest.raises(StrictDataclassError, match="Field 'num_hidden_layers' expected int, got str"):
        config.save_pretrained(tmp_path)
    assert files(tmp_path) == {}


@pytest.mark.parametrize("name", MODELS)
def test_a_bad_value_in_config_json_is_rejected_by_from_pretrained(name, tmp_path):
    config_class = MODELS[name][0]
    small(name).save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    fields = json.loads(path.read_text())
    fields["neutreno_lambda"] = math.inf  # written as `Infinity`, which Python's json reads back
    path.write_text(json.dumps(fields))
    with pytest.raises(StrictDataclassError, match="`neutreno_lambda` must be a finite float >= 0"):
        config_class.from_pretrained(tmp_path)


@pytest.mark.parametrize("name", MODELS)
def test_a_wrong_type_is_rejected_on_assignment_naming_the_field(name):
    config = small(name)
    with pytest.raises(StrictDataclassError, match="neutreno_lambda"):
        config.neutreno_lambda = "0.5"
    with pytest.raises(StrictDataclassError, match="neutreno_layers"):
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


EXAMPLE_SCRIPTS = ("run_image_classification", "run_clm_wikitext103", "run_semantic_segmentation", "run_eigen_vit")
COMPARE_TINY = [
    "--max-steps",
    "2",
    "--max-train-samples",
    "16",
    "--max-eval-samples",
    "8",
    "--probe-samples",
    "4",
    "--batch-size",
    "8",
    "--no-progress",
]


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
    message = _compare_error(
        ["--model", "segmenter-micro", "--dataset", str(folder), "--output-dir", str(tmp_path / "out"), *COMPARE_TINY],
        capsys,
    )
    assert f"--dataset {str(folder)!r} has no id2label.json" in message and str(folder / "id2label.json") in message
    assert "not guessed" in message and not (tmp_path / "out").exists()


def test_compare_resume_refuses_other_settings_naming_them(tmp_path, capsys, monkeypatch, interrupt_neutreno_training):
    out = tmp_path / "run"
    assert cli.main(["compare", "--output-dir", str(out), "--seeds", "1", *COMPARE_TINY]) == 130
    monkeypatch.undo()
    work = tmp_path / "run.incomplete"
    before = (work / "results.json").read_text()
    message = _compare_error(
        [
            "--output-dir",
            str(out),
            "--seeds",
            "1",
            *COMPARE_TINY[:-1],
            "--batch-size",
            "4",
            "--no-progress",
            "--resume",
        ],
        capsys,
    )
    assert "--resume" in message and str(work) in message and "--batch-size 8 (now 4)" in message
    assert (work / "results.json").read_text() == before and not out.exists()


def test_compare_refuses_a_folder_beside_the_output_that_is_not_a_compare_run(tmp_path, capsys, no_training):
    (tmp_path / "run.incomplete").mkdir()
    (tmp_path / "run.incomplete" / "notes.txt").write_text("mine")
    message = _compare_error(["--output-dir", str(tmp_path / "run"), *COMPARE_TINY], capsys)
    assert str(tmp_path / "run.incomplete") in message and "notes.txt" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.incomplete"]


@pytest.mark.parametrize("suffix", [".incomplete", ".replaced"])
@pytest.mark.parametrize("target", ["an empty folder", "nowhere"])
def test_compare_never_writes_through_a_link_beside_the_output(tmp_path, suffix, target):
    """`<output-dir>.incomplete` (and `.replaced`) are compare's own folders: a link there is refused, not followed
    (an empty folder it points to would have received the run) and not removed."""
    from cli_process import one_line_error, run_cli_here

    elsewhere = tmp_path / "elsewhere"
    if target == "an empty folder":
        elsewhere.mkdir()
    link = tmp_path / f"run{suffix}"
    link.symlink_to(elsewhere, target_is_directory=True)
    message = one_line_error(run_cli_here("compare", "--output-dir", tmp_path / "run", *COMPARE_TINY), "compare")
    assert message == (
        f"--output-dir {str(tmp_path / 'run')!r}: the folder beside it, {str(link)!r}, is a symbolic link (to "
        f"{str(elsewhere)!r}); compare writes its run there and never through a link. Remove the link or choose "
        "another --output-dir; nothing was written."
    )
    left = sorted(p.name for p in tmp_path.iterdir())
    assert link.is_symlink() and left == sorted([link.name, "elsewhere"] if elsewhere.exists() else [link.name])
    assert not elsewhere.exists() or list(elsewhere.iterdir()) == []


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
    with pytest.raises(
        ValueError,
        match=r"--output-dir .* already holds .*--resume-from-checkpoint.*"
        r"--overwrite-output-dir",
    ) as error:
        load_example(script).main(_example_args(script, data_dir, output_dir))
    assert str(output_dir) in str(error.value)
    assert sorted(p.name for p in output_dir.iterdir()) == before


@pytest.mark.parametrize("script", EXAMPLE_SCRIPTS[:3])
@pytest.mark.parametrize("spelling", [[], ["true"]], ids=["no path", "true"])
def test_resuming_without_a_checkpoint_names_the_flag_and_the_folder(script, spelling, data_dir, tmp_path, no_training):
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
        example.main(
            _example_args("run_eigen_vit", data_dir, tmp_path / "run")
            + ["--resume-from-checkpoint", str(tmp_path / "ckpt")]
        )
    with pytest.raises(ValueError, match=r"--resume-from-checkpoint: --output-dir .* holds no interrupted run"):
        example.main(_example_args("run_eigen_vit", data_dir, tmp_path / "run") + ["--resume-from-checkpoint"])
    assert not (tmp_path / "run").exists()


# ====================================================================================================================
# Model-level "nothing silent": live edits, the segmentation ignore index, missing folders, GPT ids and labels, and
# input checks that never wait for a device.
# ====================================================================================================================


def _assert_edit_is_live(model_class, config_class, fields: dict, edit: dict, inputs, tmp_path) -> None:
    """Edit `model.config` of a built model: the model must compute what a model built from the edited config (same
    weights) computes, and so must the model saved after the edit and loaded back."""
    torch.manual_seed(0)
    model = model_class(config_class(**fields)).eval()
    with torch.no_grad():
        for param in model.parameters():  # away from the initialisation (all eigenvalues equal, zero biases)
            param.add_(0.2 * torch.randn_like(param))
        before = model(inputs).logits
        for name, value in edit.items():
            setattr(model.config, name, value)
        edited = model(inputs).logits
        built = model_class(config_class(**{**fields, **edit})).eval()
        built.load_state_dict(model.state_dict())
        model.save_pretrained(tmp_path)
        reloaded = model_class.from_pretrained(tmp_path).eval()
        assert not torch.allclose(edited, before), "the edit must change the function, or the test proves nothing"
        torch.testing.assert_close(edited, built(inputs).logits, atol=0, rtol=0)
        torch.testing.assert_close(reloaded(inputs).logits, edited, atol=0, rtol=0)


@pytest.mark.parametrize(
    "name, edit",
    [
        ("neutreno_vit", dict(neutreno_lambda=0)),
        ("neutreno_vit", dict(neutreno_layers=[2])),
        ("eigen_vit", dict(neutreno_lambda=0.5)),
        ("eigen_vit", dict(spectrum_sign="positive")),
        ("eigen_vit", dict(eigenvalue_range=[-0.3, -0.05])),
        ("neutreno_gpt", dict(neutreno_lambda=0)),
        ("neutreno_gpt", dict(neutreno_layers=[1])),
    ],
    ids=str,
)
def test_an_edited_setting_applies_at_once_and_is_what_the_saved_model_computes(name, edit, tmp_path):
    config_class, model_class, fields = MODELS[name]
    inputs = torch.randn(2, 3, 16, 16) if "vit" in name else token_ids(2, 6)
    _assert_edit_is_live(model_class, config_class, {**fields, "neutreno_lambda": 0.6}, edit, inputs, tmp_path)


@pytest.mark.parametrize(
    "edit", [dict(decoder_neutreno_lambda=0.9), dict(neutreno_lambda=0.1)], ids=["decoder λ", "λ the decoder follows"]
)
def test_an_edited_decoder_lambda_applies_at_once_and_is_what_the_saved_segmenter_computes(edit, tmp_path):
    _assert_edit_is_live(
        hf_neutreno.NeuTRENOViTForSemanticSegmentation,
        hf_neutreno.NeuTRENOViTConfig,
        {**SEGMENTER, "neutreno_lambda": 0.6},
        edit,
        torch.randn(2, 3, 16, 16),
        tmp_path,
    )


@pytest.mark.parametrize(
    "name, field, value, message",
    [
        ("neutreno_vit", "neutreno_lambda", float("nan"), "`neutreno_lambda` must be a finite float >= 0"),
        ("neutreno_vit", "neutreno_layers", [0, 2], "`neutreno_layers` cannot contain 0"),
        ("neutreno_vit", "decoder_neutreno_lambda", float("nan"), "`decoder_neutreno_lambda` must be a finite float"),
        ("eigen_vit", "spectrum_sign", "sideways", "'spectrum_sign' expected one of \\('negative', 'positive'\\)"),
        ("eigen_vit", "eigenvalue_range", [0.0, float("nan")], "`eigenvalue_range` must be a list \\[low, high\\]"),
        ("neutreno_gpt", "neutreno_lambda", float("inf"), "`neutreno_lambda` must be a finite float >= 0"),
    ],
)
def test_a_bad_edit_of_a_setting_on_a_built_model_raises_naming_the_field(name, field, value, message):
    _, model_class, fields = MODELS[name]
    model = model_class(small(name))
    before = getattr(model.config, field)
    with pytest.raises(StrictDataclassError, match=message):
        setattr(model.config, field, value)
    assert getattr(model.config, field) == before


def test_an_ignore_index_inside_the_classes_is_refused_naming_the_field_and_the_classes():
    config = hf_neutreno.NeuTRENOViTConfig(**SEGMENTER, semantic_loss_ignore_index=3)
    message = r"`semantic_loss_ignore_index` \(3\) is one of the classes \[0, 10\] \(`num_labels`=11\)"
    with pytest.raises(ValueError, match=message):
        hf_neutreno.NeuTRENOViTForSemanticSegmentation(config)
    # The loss reads it at each forward: an edit on a built model is refused there.
    model = hf_neutreno.NeuTRENOViTForSemanticSegmentation(hf_neutreno.NeuTRENOViTConfig(**SEGMENTER))
    model.config.semantic_loss_ignore_index = 3
    with pytest.raises(ValueError, match=message):
        model(torch.randn(1, 3, 16, 16), labels=torch.zeros(1, 16, 16, dtype=torch.long))
    for outside in (255, -100, 11):
        model.config.semantic_loss_ignore_index = outside
        assert model(torch.randn(1, 3, 16, 16), labels=torch.zeros(1, 16, 16, dtype=torch.long)).loss.isfinite()


@pytest.mark.parametrize("convert", ["gpt2_to_neutreno", "vit_to_neutreno", "vit_to_segmenter"])
@pytest.mark.parametrize("missing", ["/a/missing/folder", "./no-such-checkpoint", "path"], ids=str)
def test_a_missing_checkpoint_folder_is_named_as_a_folder_that_does_not_exist(convert, missing, tmp_path):
    from hf_neutreno import convert as module

    path = tmp_path / "no-such-checkpoint" if missing == "path" else missing
    with pytest.raises(ValueError, match=re.escape(f"checkpoint '{path}': no such folder (it does not exist here);")):
        getattr(module, convert)(path)


def test_gpt_token_ids_outside_the_vocabulary_are_named_with_the_vocabulary_size():
    model = gpt()
    for bad in (GPT["vocab_size"], GPT["vocab_size"] + 5, -1):
        ids = token_ids(2, 5)
        ids[1, 2] = bad
        with pytest.raises(
            ValueError, match=re.escape(f"`input_ids` hold [{bad}], outside the vocabulary [0, 96] (`vocab_size`=97)")
        ):
            model(ids)
    ids = token_ids(2, 5)
    labels = ids.clone()
    labels[0, 0] = 400
    with pytest.raises(ValueError, match=re.escape("`labels` hold [400], outside the vocabulary [0, 96]")):
        model(ids, labels=labels)
    labels[0, 0] = -100  # ignored: allowed
    assert model(ids, labels=labels).loss.isfinite()


@pytest.mark.parametrize("shape", [(2, 4), (1, 5), (2, 5, 1), (10,)], ids=str)
def test_gpt_labels_that_do_not_match_the_ids_are_named_with_both_shapes(shape):
    model = gpt()
    expected = re.escape(f"`labels` must have the shape of `input_ids`, (batch, tokens) = (2, 5); got {shape}")
    with pytest.raises(ValueError, match=expected):
        model(token_ids(2, 5), labels=torch.zeros(shape, dtype=torch.long))


def test_out_of_range_segmentation_labels_are_still_named_on_the_cpu():
    model = hf_neutreno.NeuTRENOViTForSemanticSegmentation(hf_neutreno.NeuTRENOViTConfig(**SEGMENTER)).eval()
    labels = torch.zeros(2, 16, 16, dtype=torch.long)
    labels[1, 3, 4] = 11
    with pytest.raises(ValueError, match=r"`labels` hold \[11\], outside the classes \[0, 10\] \(`num_labels`=11\)"):
        model(torch.randn(2, 3, 16, 16), labels=labels)


def test_input_checks_never_read_device_values_into_python():
    """On an accelerator the value checks would wait for the device at every step (`.any()`, `.item()`, `unique`,
    `tolist` copy to the host). Tensors on the meta device have no values: every such op raises there, as the first
    assertion shows, so a whole forward with labels on the meta device proves the checks leave device tensors alone.
    (The meta device stands for any non-CPU device: the checks only look at `device.type`.)"""
    labels = torch.zeros(2, 16, 16, dtype=torch.long, device="meta")
    with pytest.raises(RuntimeError, match="meta"):
        bool((labels >= 11).any())  # what the CPU check does: it would be caught here
    with torch.device("meta"):
        segmenter = hf_neutreno.NeuTRENOViTForSemanticSegmentation(hf_neutreno.NeuTRENOViTConfig(**SEGMENTER))
        language_model = hf_neutreno.NeuTRENOGPTForCausalLM(small("neutreno_gpt"))
    out = segmenter(torch.randn(2, 3, 16, 16, device="meta"), labels=labels)
    assert out.loss.device.type == "meta"
    ids = torch.zeros(2, 5, dtype=torch.long, device="meta")
    assert language_model(ids, labels=ids).loss.device.type == "meta"
    # Shapes are metadata: still checked on any device.
    with pytest.raises(ValueError, match="`labels` must have the shape of `input_ids`"):
        language_model(ids, labels=ids[:, :4])
    with pytest.raises(ValueError, match=r"`labels` must be \(batch, height, width\)"):
        segmenter(torch.randn(2, 3, 16, 16, device="meta"), labels=labels[:, :8])


@pytest.mark.parametrize(
    "name, field, value",
    [
        ("neutreno_vit", "attention_kernel", "linear"),  # no parameter to tell: a reloaded model would differ silently
        ("neutreno_vit", "symmetric_attention", True),
        ("neutreno_vit", "num_attention_heads", 4),
        ("neutreno_vit", "hidden_dropout_prob", 0.1),
        ("eigen_vit", "eigen_layers", [0]),
        ("neutreno_gpt", "norm_position", "pre"),
        ("neutreno_gpt", "scale_embeddings", False),
    ],
    ids=str,
)
def test_an_edited_architecture_field_makes_the_built_model_refuse_to_run_naming_it(name, field, value):
    """Fields that fix the parameters, attention classes or dropout rates cannot be followed by a built model."""
    _, model_class, _ = MODELS[name]
    model = model_class(small(name)).eval()
    inputs = torch.randn(1, 3, 16, 16) if "vit" in name else token_ids(1, 4)
    before = model(inputs).logits
    original = getattr(model.config, field)
    setattr(model.config, field, value)
    with pytest.raises(
        ValueError, match=re.escape(f"`{field}` was set to {value!r} on the config of a model built with {original!r}")
    ):
        model(inputs)
    setattr(model.config, field, original)  # set back: the model runs as before
    torch.testing.assert_close(model(inputs).logits, before, atol=0, rtol=0)


def test_an_edited_decoder_field_makes_the_segmenter_refuse_to_run_naming_it():
    model = hf_neutreno.NeuTRENOViTForSemanticSegmentation(hf_neutreno.NeuTRENOViTConfig(**SEGMENTER)).eval()
    model.config.decoder_num_attention_heads = 4
    with pytest.raises(ValueError, match="`decoder_num_attention_heads` was set to 4 on the config of a model built"):
        model(torch.randn(1, 3, 16, 16))


@pytest.mark.parametrize(
    "model_class, config_class, fields, field, value",
    [
        (hf_neutreno.NeuTRENOViTForImageClassification, hf_neutreno.NeuTRENOViTConfig, VIT, "num_hidden_layers", 4),
        (hf_neutreno.EigenViTForImageClassification, hf_neutreno.EigenViTConfig, VIT, "num_hidden_layers", 4),
        (hf_neutreno.NeuTRENOGPTForCausalLM, hf_neutreno.NeuTRENOGPTConfig, GPT, "num_hidden_layers", 4),
        (hf_neutreno.NeuTRENOViTModel, hf_neutreno.NeuTRENOViTConfig, VIT, "attention_kernel", "linear"),
        (
            hf_neutreno.NeuTRENOViTForSemanticSegmentation,
            hf_neutreno.NeuTRENOViTConfig,
            SEGMENTER,
            "num_hidden_layers",
            4,
        ),
        (
            hf_neutreno.NeuTRENOViTForSemanticSegmentation,
            hf_neutreno.NeuTRENOViTConfig,
            SEGMENTER,
            "decoder_num_layers",
            3,
        ),
        (
            hf_neutreno.NeuTRENOViTForSemanticSegmentation,
            hf_neutreno.NeuTRENOViTConfig,
            SEGMENTER,
            "decoder_hidden_size",
            32,
        ),
    ],
    ids=[
        "vit layers",
        "eigen layers",
        "gpt layers",
        "vit kernel",
        "segmenter layers",
        "segmenter decoder layers",
        "segmenter decoder size",
    ],
)
def test_an_edited_architecture_field_is_refused_by_save_pretrained_writing_nothing(
    model_class, config_class, fields, field, value, tmp_path
):
    """The weights of a model built with one value do not fit another: saved with it, they would make a checkpoint
    that loads with missing or unexpected weights or, where no weight tells (the kernel), computes something else."""
    earlier, empty = earlier_save_and_empty_folder(model_class, config_class(**fields), tmp_path)
    before = files(earlier)
    model = model_class(config_class(**fields))
    original = getattr(model.config, field)
    setattr(model.config, field, value)
    model.config.validate()  # a valid config: only the built model tells that it does not describe it
    message = re.escape(f"`{field}` was set to {value!r} on the config of a model built with {original!r}")
    for folder in (earlier, empty):
        with pytest.raises(ValueError, match=message):
            model.save_pretrained(folder)
    assert files(earlier) == before
    assert files(empty) == {}
    setattr(model.config, field, original)  # set back: it saves, and loads without missing or unexpected weights
    model.save_pretrained(empty)
    _, info = model_class.from_pretrained(empty, output_loading_info=True)
    assert not any(info.values()), info


def test_a_segmenter_whose_ignore_index_was_edited_into_the_classes_is_not_saved(tmp_path):
    """No Segmenter can be built from such a config: saved, it would be a checkpoint that does not load."""
    model_class = hf_neutreno.NeuTRENOViTForSemanticSegmentation
    earlier, empty = earlier_save_and_empty_folder(model_class, hf_neutreno.NeuTRENOViTConfig(**SEGMENTER), tmp_path)
    before = files(earlier)
    model = model_class(hf_neutreno.NeuTRENOViTConfig(**SEGMENTER))
    model.config.semantic_loss_ignore_index = 3
    for folder in (earlier, empty):
        with pytest.raises(ValueError, match=r"`semantic_loss_ignore_index` \(3\) is one of the classes \[0, 10\]"):
            model.save_pretrained(folder)
    assert files(earlier) == before
    assert files(empty) == {}


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLE_SCRIPTS)
def test_each_example_says_in_one_line_that_the_hub_cannot_be_reached(script, tmp_path):
    """A Hub dataset without a network (here offline mode): one line naming the dataset and what runs offline, exit
    status 2, no traceback."""
    from cli_process import SRC

    flag = "--dataset" if script == "run_eigen_vit" else "--dataset-name"
    dataset = {"run_clm_wikitext103": "Salesforce/wikitext", "run_semantic_segmentation": "scene_parse_150"}.get(
        script, "uoft-cs/cifar10"
    )
    env = {**os.environ, "PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home")}
    command = [sys.executable, str(EXAMPLES / f"{script}.py"), flag, dataset, "--output-dir", str(tmp_path / "out")]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{script}.py: error: Couldn't reach ") and f"'{dataset}'" in last, proc.stderr[-3000:]
    assert ".." not in last
    assert last.endswith("the image dataset `digits` (bundled with scikit-learn) needs no network.")


@pytest.mark.slow
def test_the_offline_example_trains_on_a_cpu_without_pin_memory_warnings(tmp_path):
    """examples/README.md's first command, as written but for its length, in a fresh process on this CPU."""
    from cli_process import SRC

    readme = (EXAMPLES / "README.md").read_text()
    command = shlex.split(re.sub(r"\\\n\s*", " ", re.findall(r"```bash\n(.*?)```", readme, re.S)[0]))
    assert command[:2] == ["python", "examples/run_image_classification.py"] and "digits" in command
    command = [sys.executable, str(EXAMPLES.parent / command[1]), *command[2:], "--max-steps", "3"]
    command[command.index("--output-dir") + 1] = str(tmp_path / "run")
    env = {**os.environ, "PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "pin_memory" not in proc.stdout + proc.stderr
    assert 0 <= json.loads((tmp_path / "run" / "all_results.json").read_text())["eval_accuracy"] <= 1
