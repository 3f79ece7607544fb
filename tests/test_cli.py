"""`hf-neutreno` as a user meets it: every subcommand answers a bad argument or a missing file with ONE line on
stderr, `hf-neutreno COMMAND: error: ...`, and exit status 2, never a traceback; flags are kebab-case; help and error
texts name Hub datasets, not this machine's folders."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from transformers import ViTImageProcessorPil

import hf_neutreno
import real_data
from cli_process import one_line_error, run_cli_here
from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTForImageClassification
from hf_neutreno.cli import SUBCOMMANDS, main
from tiny_models import MICRO_VIT


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("model")
    config = NeuTRENOViTConfig(**MICRO_VIT, num_hidden_layers=2, neutreno_lambda=0.6)
    NeuTRENOViTForImageClassification(config).save_pretrained(folder)
    ViTImageProcessorPil(size={"height": 8, "width": 8}).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory) -> Path:
    """A WikiText-shaped Parquet folder (a `text` column per split), read in a moment."""
    folder = tmp_path_factory.mktemp("text")
    for split in ("validation", "test"):
        pq.write_table(pa.table({"text": [" a b c \n", " d e f \n"]}), folder / f"{split}-00000-of-00001.parquet")
    return folder


def cases(model_dir: Path, text_dir: Path, tmp: Path) -> dict[str, list[tuple[list[str], str]]]:
    """Per subcommand: (arguments, a part of the expected message) for a bad argument and for missing files.
    Flag values that pass argparse but not the command's own checks, and files that are not there."""
    missing = str(tmp / "missing")
    return {
        "compare": [
            (["--batch-size", "0", "--output-dir", str(tmp / "out")], "--batch-size must be at least 1"),
            (["--dataset", missing, "--output-dir", str(tmp / "out")], "does not exist"),
        ],
        "diagnose": [
            ([str(model_dir), "--dataset", str(text_dir), "--num-samples", "0"], "`--num-samples` must be at least 1"),
            ([str(model_dir), "--dataset", missing], "does not exist"),
            ([missing, "--dataset", str(text_dir)], f"MODEL_OR_DIR {missing!r}: no such folder"),
            ([str(model_dir), "--dataset", str(text_dir), "--compare", missing + ".json"], "No such file"),
        ],
        "evaluate-lm": [
            ([str(model_dir), "--dataset", str(text_dir), "--context-length", "0"],
             "--context-length must be at least 1"),
            ([str(model_dir), "--dataset", str(text_dir), "--split", "train"], "Unknown split 'train'"),
            ([missing, "--dataset", str(text_dir)], f"MODEL {missing!r}: no such folder"),
            ([str(model_dir), "--dataset", missing], "does not exist"),
        ],
        "push": [
            ([str(model_dir), "me/model", "--results", missing + ".json", "--dataset", "x"], "No such file"),
            ([missing, "me/model"], "has no config.json"),
            ([str(model_dir), "me/model", "--oversmoothing", str(model_dir / "config.json")],
             "has no per-layer values"),
            ([str(model_dir), "me/model"], "offline mode (HF_HUB_OFFLINE=1)"),  # a traceback until now
        ],
    }  # fmt: skip


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_user_errors_are_one_line_and_exit_2(command, model_dir, text_dir, tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # as the tests run: `push` fails offline
    for argv, expected in cases(model_dir, text_dir, tmp_path)[command]:
        assert main([command, *argv]) == 2, argv
        err = capsys.readouterr().err
        # Progress bars (loading a dataset or model) may come before; the error is one line, the last.
        errors = [line for line in err.splitlines() if "error" in line.lower() or "Traceback" in line]
        assert len(errors) == 1 and errors[0].startswith(f"hf-neutreno {command}: error: "), err
        assert errors[0] == err.strip().splitlines()[-1] and expected in errors[0], (argv, err)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_argparse_errors_are_one_line_and_exit_2(command, capsys):
    """argparse's own errors (here a missing argument or an unknown flag) are one line too, without the usage."""
    assert main([command, "--no-such-flag", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hf-neutreno {command}: error: "), err
    assert err[0].endswith(f"(see `hf-neutreno {command} --help`)")


def test_the_console_script_exits_2_with_one_line(model_dir, tmp_path):
    """The installed entry point, in a fresh process: no traceback reaches the user."""
    script = shutil.which("hf-neutreno", path=str(Path(sys.executable).parent))
    assert script, "the console script is installed next to the interpreter (pip install -e .)"
    src = str(Path(hf_neutreno.__file__).resolve().parents[1])  # the code under test, wherever it is installed
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": src}
    proc = subprocess.run(
        [script, "push", str(model_dir), "me/model"], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "hf-neutreno push: error: Cannot push to 'me/model': the Hugging Face Hub is in offline mode "
        "(HF_HUB_OFFLINE=1). Nothing was written, locally or on the Hub. Unset HF_HUB_OFFLINE to push, or write the "
        "folder with `hf_neutreno.hub.save_for_hub(folder, ...)` and upload it later with `hf upload REPO_ID FOLDER`."
    ]


def test_an_unexpected_error_keeps_its_traceback(monkeypatch):
    """A bug is not a user error: it is not turned into one line."""
    from hf_neutreno.commands import push

    def broken(args):
        raise KeyError("bug")

    monkeypatch.setattr(push, "run", broken)
    with pytest.raises(KeyError, match="bug"):
        main(["push", "model", "me/model"])


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_flags_are_kebab_case_and_help_names_no_local_folder(command, capsys):
    assert main([command, "--help"]) == 0
    text = capsys.readouterr().out
    flags = set(re.findall(r"--[\w-]+", text))
    assert "--dataset" in flags and not [flag for flag in flags if "_" in flag], flags
    assert str(real_data.MIRROR) not in text and "HF_NEUTRENO_DATA" not in text  # no machine's local data folder


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory) -> Path:
    """A tiny GPT-2 with a word-level tokenizer for text_dir's words."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("lm")
    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.train_from_iterator(["a b c d e f"], trainers.WordLevelTrainer(special_tokens=["<unk>", "<eos>"]))
    hf_tokenizer = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", eos_token="<eos>")
    GPT2LMHeadModel(GPT2Config(vocab_size=len(hf_tokenizer), n_embd=16, n_layer=1, n_head=2)).save_pretrained(folder)
    hf_tokenizer.save_pretrained(folder)
    return folder


def test_evaluate_lm_never_replaces_an_output_file_silently(lm_dir, text_dir, tmp_path):
    existing = tmp_path / "eval.json"
    existing.write_text("{}\n")
    argv = ["evaluate-lm", lm_dir, "--dataset", text_dir, "--split", "test", "--context-length", "2", "--output"]
    message = one_line_error(run_cli_here(*argv, existing), "evaluate-lm")
    assert (
        message
        == f"--output {str(existing)!r} already exists; pass --overwrite to replace it, or give another file name."
    )
    assert existing.read_text() == "{}\n"
    proc = run_cli_here(*argv, existing, "--overwrite")
    assert proc.returncode == 0, proc.stderr
    results = json.loads(existing.read_text())["results"]["test"]
    assert set(results) == {"sliding", "blocks"} and results["blocks"]["context_length"] == 2


def test_evaluate_lm_refuses_a_value_path_checkpoint_without_trust_remote_code(lm_dir, text_dir, tmp_path):
    """Without --trust-remote-code transformers builds the plain model from an adapted checkpoint: the command said
    nothing and reported the plain model's perplexity. It names the value path and the flag, and with the flag runs
    the adapted model."""
    import shutil

    from transformers import GPT2LMHeadModel

    from hf_neutreno import apply_value_path

    folder = tmp_path / "adapted"
    shutil.copytree(lm_dir, folder)
    model = GPT2LMHeadModel.from_pretrained(folder)
    model.config.n_layer = 2  # a value path needs two layers: rebuild with two
    adapted = apply_value_path(GPT2LMHeadModel(model.config), "neutreno")
    adapted.save_pretrained(folder)
    argv = ["evaluate-lm", folder, "--dataset", text_dir, "--split", "test", "--context-length", "2"]
    message = one_line_error(run_cli_here(*argv), "evaluate-lm")
    assert message.startswith(f"{str(folder)!r} was saved with a value path (") and "'method': 'neutreno'" in message
    assert "only --trust-remote-code loads" in message
    proc = run_cli_here(*argv, "--trust-remote-code")
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
def test_evaluate_lm_scores_a_neutreno_gpt_checkpoint_in_a_fresh_process(text_dir, tmp_path):
    """The command as a user runs it, a fresh `hf-neutreno` process, on a saved NeuTRENO GPT with and without
    --trust-remote-code: its config was read before this package's classes were registered, so transformers asked
    whether to run the folder's code and the command stopped. The perplexity is the model's own, from its loss."""
    import math

    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from cli_process import run_cli
    from hf_neutreno import NeuTRENOGPTConfig, NeuTRENOGPTForCausalLM
    from tiny_models import TINY_NEUTRENO_GPT

    folder = tmp_path / "gpt"
    vocabulary = {word: i for i, word in enumerate(["<pad>", "<unk>", "<eos>", *"abcdef"])}
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", unk_token="<unk>").save_pretrained(folder)
    torch.manual_seed(0)
    model = NeuTRENOGPTForCausalLM(NeuTRENOGPTConfig(**{**TINY_NEUTRENO_GPT, "vocab_size": 9}, neutreno_lambda=0.4))
    model.save_pretrained(folder)
    ids = torch.tensor([[vocabulary[w] for w in "a b c d e f".split()]])
    with torch.no_grad():
        expected = math.exp(model(ids, labels=ids).loss.item())
    for extra in ([], ["--trust-remote-code"]):
        argv = ["evaluate-lm", folder, "--dataset", text_dir, "--split", "test", "--protocol", "blocks"]
        proc = run_cli(*argv, "--context-length", "8", "--output", tmp_path / f"out{len(extra)}.json", *extra)
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads((tmp_path / f"out{len(extra)}.json").read_text())["results"]["test"]["blocks"]
        assert result["num_tokens"] == 5 and result["perplexity"] == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("repo_id", ["../x", "me/model\nname", "a/b/c", "me/model."], ids=repr)
def test_push_refuses_a_repo_id_the_hub_refuses_before_writing_anything(model_dir, tmp_path, repo_id):
    proc = run_cli_here("push", model_dir, repo_id, "--save-to", tmp_path / "upload")
    message = one_line_error(proc, "push")
    assert message.startswith(f"repo_id {repo_id!r} is not a Hub repository id (`name` or `namespace/name`): Repo id ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("files", [{"my_dataset.py": "import datasets\n"}, {}], ids=["loading script", "empty"])
@pytest.mark.parametrize("command", ["compare", "diagnose"])
def test_a_dataset_folder_without_data_files_is_named_with_what_it_should_hold(model_dir, tmp_path, files, command):
    folder = tmp_path / "data"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    argv = (
        ["--dataset", folder, "--output-dir", tmp_path / "out"]
        if command == "compare"
        else [model_dir, "--dataset", folder]
    )
    message = one_line_error(run_cli_here(command, *argv), command)
    found = "only a loading script (my_dataset.py), which is not run" if files else "no data files"
    assert message.endswith(  # compare names its flag first
        f"Dataset folder {str(folder)!r} holds {found}. A dataset folder holds the data itself: Parquet files "
        "named as on the Hub (train-00000-of-00001.parquet, test-...), CSV or JSON-lines files named by split "
        "(train.csv, test.jsonl), or an image folder (train/<label>/*.png)."
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, text", [("test.csv", "text\na b c\nd e f\n"), ("test.jsonl", '{"text": "a b c"}\n')])
def test_a_dataset_folder_of_csv_or_json_lines_is_read(lm_dir, tmp_path, name, text):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / name).write_text(text)
    proc = run_cli_here(
        "diagnose", lm_dir, "--dataset", tmp_path / "data", "--metrics", "cosine_similarity", "--no-progress"
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^layer 1 +-?\d\.\d{4}$", proc.stdout, flags=re.M), proc.stdout
