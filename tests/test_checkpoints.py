"""The one rule that tells a local folder from a Hub id, and the one loader, with one message wherever a model or a
dataset is named (`hf_neutreno.checkpoints`)."""

import pytest
import torch

from hf_neutreno.checkpoints import check_source, is_local, load_checkpoint
from hf_neutreno.cli import main


@pytest.mark.parametrize(
    "name, local",
    [
        ("gpt2", False),
        ("google/vit-base-patch16-224", False),
        ("owner/model-v1.5", False),
        ("./gpt2", True),
        ("/abs/folder", True),
        ("~/folder", True),
        ("a/b/c", True),  # cannot be a Hub id
        ("data.parquet", True),  # a file's name
        ("model.safetensors", True),
    ],
)
def test_the_one_folder_or_hub_rule(name, local):
    assert is_local(name) is local


def test_a_local_name_must_be_a_folder(tmp_path):
    check_source(tmp_path, "MODEL")  # a folder passes
    check_source("gpt2", "MODEL")  # a Hub id passes unchecked
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ValueError, match=r"MODEL '.*file.txt': a file, not a folder"):
        check_source(tmp_path / "file.txt", "MODEL")
    with pytest.raises(ValueError, match=r"--model './missing': no such folder \(it does not exist here\)"):
        check_source("./missing", "--model")


def test_every_command_names_a_missing_model_folder_alike(tmp_path, capsys):
    """compare, diagnose and evaluate-lm, and the converters, read a missing folder as a folder, not as a repo id."""
    from hf_neutreno import convert

    missing = str(tmp_path / "missing")
    for command in (
        ["compare", "--model", missing, "--dataset", "digits", "--output-dir", str(tmp_path / "out")],
        ["diagnose", missing, "--dataset", "digits"],
        ["evaluate-lm", missing],
    ):
        assert main(command) == 2, command
        assert f"'{missing}': no such folder (it does not exist here)" in capsys.readouterr().err, command
    assert not (tmp_path / "out").exists()  # nothing written before the inputs are checked
    with pytest.raises(ValueError, match="no such folder"):
        convert.gpt2_to_neutreno(missing)


def test_the_loader_picks_the_class_the_config_names(tmp_path):
    """Without a class, the saved architecture loads (no weight left unused), equal to what was saved."""
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=50)).eval()
    model.config.auto_map = {"AutoTokenizer": ["tokenization.SlowTokenizer", None]}  # a tokenizer's pair of classes
    model.save_pretrained(tmp_path)
    loaded = load_checkpoint(tmp_path).eval()
    assert type(loaded) is GPT2LMHeadModel
    ids = torch.arange(6)[None]
    assert torch.equal(loaded(ids).logits, model(ids).logits)


REMOTE_HEAD = """
from torch import nn
from transformers import BertModel, BertPreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput


class OwnHeadBertForSequenceClassification(BertPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.own_head = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, output_hidden_states=None, return_dict=None, **kwargs):
        out = self.bert(input_ids, attention_mask=attention_mask, output_hidden_states=output_hidden_states)
        logits = self.own_head(out.last_hidden_state[:, 0])
        return SequenceClassifierOutput(logits=logits, hidden_states=out.hidden_states)
"""


def test_a_remote_code_head_on_a_transformers_model_type_needs_trust_remote_code(tmp_path, monkeypatch):
    """A checkpoint whose class is remote code over a transformers model type (bert): without trust_remote_code the
    Auto class builds BertForSequenceClassification, whose head has other names, so the saved head is left out and
    a random one drawn. Refused instead; with trust_remote_code the saved class loads, equal to what was saved."""
    import importlib

    from transformers import BertConfig

    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "own_head_bert.py").write_text(REMOTE_HEAD)
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    module = importlib.import_module("own_head_bert")
    model_class = module.OwnHeadBertForSequenceClassification
    model_class.register_for_auto_class("AutoModelForSequenceClassification")
    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, vocab_size=50, num_labels=3
    )
    model = model_class(config).eval()
    model.save_pretrained(tmp_path / "model")
    model.save_pretrained(tmp_path / "pickled")  # weights in pytorch_model.bin: the refusal, not a weights message
    (tmp_path / "pickled" / "model.safetensors").unlink()
    torch.save(model.state_dict(), tmp_path / "pickled" / "pytorch_model.bin")
    for folder in ("model", "pickled"):
        with pytest.raises(
            ValueError, match="^MODEL .*: its class OwnHeadBertForSequenceClassification is remote code"
        ):
            load_checkpoint(tmp_path / folder)
    loaded = load_checkpoint(tmp_path / "model", trust_remote_code=True).eval()
    assert type(loaded).__name__ == "OwnHeadBertForSequenceClassification"
    ids = torch.arange(6)[None]
    assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)


def test_a_checkpoint_saved_with_a_value_path_loads_only_as_the_adapted_model(tmp_path):
    """Without trust_remote_code, or with the transformers class, an adapted checkpoint builds the plain model: its
    weights load and the value path does not run (the logits of the plain model, not the saved one's). Refused with
    any class that builds it plain; with trust_remote_code the adapted model loads, equal to what was saved."""
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

    from hf_neutreno import apply_value_path

    torch.manual_seed(0)
    model = apply_value_path(GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=50)), "neutreno")
    model.eval().save_pretrained(tmp_path)
    for model_class in (AutoModelForCausalLM, GPT2LMHeadModel):
        with pytest.raises(ValueError, match=r"saved with a value path .* only --trust-remote-code"):
            load_checkpoint(tmp_path, model_class, what="--model")
    loaded = load_checkpoint(tmp_path, AutoModelForCausalLM, trust_remote_code=True).eval()
    ids = torch.arange(6)[None]
    assert type(loaded).__name__ == "ValuePathGPT2LMHeadModel"
    assert torch.equal(loaded(ids).logits, model(ids).logits)
