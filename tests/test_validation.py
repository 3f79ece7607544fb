"""Config and input validation (issue 13): the inputs that used to pass silently, and one set of config rules that
runs at construction, in `config.validate()`, in `save_pretrained`, in `from_pretrained` and when a model is built."""

import json
import math
import re

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError

import hf_neutreno

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


@pytest.mark.parametrize("name", MODELS)
def test_a_layer_list_edited_in_place_is_caught_by_validate_and_by_save_before_config_and_weights(name, tmp_path):
    """An in-place edit of a list passes no assignment: `validate()`, building a model and `save_pretrained` run the
    rules. transformers copies a model's code files before it validates the config, so a refused save leaves at most
    those (the same files a saved model already holds): never a config.json or weights."""
    _, model_class, _ = MODELS[name]
    model_class(small(name)).save_pretrained(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    model = model_class(small(name, neutreno_layers=[1, 2]))
    model.config.neutreno_layers.append(0)
    with pytest.raises(StrictDataclassError, match="`neutreno_layers` cannot contain 0"):
        model.config.validate()
    with pytest.raises(StrictDataclassError, match="`neutreno_layers` cannot contain 0"):
        model_class(model.config)
    with pytest.raises(StrictDataclassError, match="`neutreno_layers` cannot contain 0"):
        model.save_pretrained(tmp_path)
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before


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
