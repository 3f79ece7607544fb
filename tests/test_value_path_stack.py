"""`apply_value_path(model, ..., stack=...)`: one stack of a model with several (a vision-language model's language
model beside its vision tower), adapted on the whole model so that its own save carries the value path."""

import copy
import types

import pytest
import torch
from safetensors.torch import load_file
from transformers import (
    AutoModel,
    AutoModelForImageTextToText,
    LlavaForConditionalGeneration,
    MistralConfig,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
)

from hf_neutreno import apply_value_path, load_value_path, remove_value_path, save_value_path
from hf_neutreno.value_path import MARKER, coefficient_parameters, is_value_path_model
from test_value_path import _set_coefficients, reference_decoder_logits
from tiny_models import CACHE_FIELD, DECODER, IMAGE_TOKEN, tiny_model, tiny_vlm, tiny_vlm_inputs, train_language_model

STACK = "model.language_model.layers"


def _seen(vlm, inputs, grad: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The logits, the vision tower's last hidden state and the language model's input embeddings of one call."""
    seen = {}
    hooks = [
        vlm.model.vision_tower.register_forward_hook(lambda m, a, out: seen.update(vision=out.last_hidden_state)),
        vlm.model.language_model.register_forward_pre_hook(
            lambda m, a, kwargs: seen.update(embeds=kwargs["inputs_embeds"]), with_kwargs=True
        ),
    ]
    try:
        with torch.set_grad_enabled(grad):
            logits = vlm(**inputs).logits
    finally:
        for hook in hooks:
            hook.remove()
    return logits, seen["vision"], seen["embeds"]


def _reference(vlm, inputs, embeds, method, coefficients) -> torch.Tensor:
    """The language model written out per head from its raw weights, on the input embeddings that the native model's
    image merge made."""
    causal_lm = types.SimpleNamespace(
        model=vlm.model.language_model, config=vlm.config.text_config, lm_head=vlm.lm_head
    )
    return reference_decoder_logits(causal_lm, inputs["input_ids"], method, coefficients, inputs_embeds=embeds)


@pytest.mark.parametrize("learnable", [False, True])
@pytest.mark.parametrize("method", ["neutreno", "value_residual"])
def test_a_named_stack_equals_a_per_head_reference_and_leaves_the_other_stack_as_it_is(method, learnable):
    vlm, inputs = tiny_vlm(), tiny_vlm_inputs()
    plain, vision, embeds = _seen(vlm, inputs)
    apply_value_path(vlm, method, 0.3, learnable=learnable, stack=STACK)
    coefficients = {1: 0.3, 2: 0.3}
    if learnable:
        _set_coefficients(vlm, [0.15, 0.7])
        coefficients = {1: 0.15, 2: 0.7}
    # the sub-models keep the model's sub-configs (adapting gives the model a config of its own)
    assert vlm.model.language_model.config is vlm.config.text_config
    assert vlm.model.vision_tower.config is vlm.config.vision_config
    logits, adapted_vision, adapted_embeds = _seen(vlm, inputs)
    assert torch.equal(adapted_vision, vision) and torch.equal(adapted_embeds, embeds)  # the vision tower as it was
    torch.testing.assert_close(logits, _reference(vlm, inputs, embeds, method, coefficients), rtol=0, atol=1e-5)
    torch.testing.assert_close(plain, _reference(vlm, inputs, embeds, method, {}), rtol=0, atol=1e-5)
    assert (logits - plain).abs().max() > 1e-2


@pytest.mark.parametrize("learnable", [False, True])
@pytest.mark.parametrize("method", ["neutreno", "value_residual"])
def test_a_named_stacks_gradients_equal_the_per_head_reference(method, learnable):
    """Every parameter's gradient (the vision tower's and projector's, through the image merge, and the coefficients')
    against autograd through the language model written out per head."""
    vlm, inputs = tiny_vlm().train(), tiny_vlm_inputs()
    apply_value_path(vlm, method, 0.3, learnable=learnable, stack=STACK)
    reference = copy.deepcopy(vlm)
    coefficients = dict(zip((1, 2), coefficient_parameters(reference))) if learnable else {1: 0.3, 2: 0.3}
    vlm(**inputs).logits.square().mean().backward()
    _, _, embeds = _seen(reference, inputs, grad=True)  # the native image merge, with its graph
    _reference(reference, inputs, embeds, method, coefficients).square().mean().backward()
    grads = {name: p.grad for name, p in vlm.named_parameters() if p.grad is not None}
    expected = {name: p.grad for name, p in reference.named_parameters() if p.grad is not None}
    assert grads.keys() == expected.keys() and any("vision_tower" in name for name in grads)
    assert any(".value_path_coefficient." in name for name in grads) == learnable
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("learnable", [False, True])
def test_a_model_adapted_by_its_stack_saves_reloads_and_generates_adapted(learnable, tmp_path):
    vlm, inputs = tiny_vlm(), tiny_vlm_inputs()
    apply_value_path(vlm, "value_residual", 0.5, learnable=learnable, stack=STACK)
    if learnable:
        with torch.no_grad():
            for parameter in coefficient_parameters(vlm):
                parameter.add_(0.2)
    with torch.no_grad():
        expected = vlm(**inputs).logits
        cached = vlm.generate(**inputs, max_new_tokens=4, do_sample=False)
        uncached = vlm.generate(**inputs, max_new_tokens=4, do_sample=False, use_cache=False)
    assert torch.equal(cached, uncached)
    vlm.save_pretrained(tmp_path / "vlm")

    reloaded = AutoModelForImageTextToText.from_pretrained(tmp_path / "vlm", trust_remote_code=True).eval()
    assert reloaded.config.value_path == vlm.config.value_path and is_value_path_model(reloaded)
    plain, info = LlavaForConditionalGeneration.from_pretrained(tmp_path / "vlm", output_loading_info=True)
    assert MARKER in info["unexpected_keys"]  # the load that drops the value path says so
    with torch.no_grad():
        assert torch.equal(reloaded(**inputs).logits, expected)
        assert not torch.allclose(plain.eval()(**inputs).logits, expected)

    # saved apart from the base, and put back onto a plain one with its stack
    save_value_path(vlm, tmp_path / "delta")
    base = tiny_vlm()
    load_value_path(base, tmp_path / "delta")
    with torch.no_grad():
        assert torch.equal(base(**inputs).logits, expected)

    remove_value_path(reloaded)
    with torch.no_grad():
        assert torch.equal(reloaded(**inputs).logits, tiny_vlm()(**inputs).logits)


def test_a_stack_is_named_among_the_models_stacks_and_refused_otherwise_before_anything_changes():
    vlm = tiny_vlm()
    with pytest.raises(ValueError, match=r"2 stacks of layers .*Name the one to adapt with `stack=`"):
        apply_value_path(vlm, "neutreno")
    for stack, message in (
        ("model.language_model", r"must name one of LlavaForConditionalGeneration's stacks.*model\.language_model\."),
        (3, "must be the path of a list of layers"),
    ):
        with pytest.raises(ValueError, match=message):
            apply_value_path(vlm, "neutreno", stack=stack)
    assert type(vlm) is LlavaForConditionalGeneration and getattr(vlm.config, "value_path", None) is None
    # a model of one stack may name it; the saved settings then carry it
    model = apply_value_path(tiny_model("llama"), "neutreno", stack="model.layers")
    assert model.config.value_path["stack"] == "model.layers"
    with pytest.raises(ValueError, match="must name one of"):
        apply_value_path(tiny_model("llama"), "neutreno", stack="model.norm")


def test_a_named_stack_is_adapted_by_its_own_config():
    """A sliding-window language model inside a VLM, whose own config has neither the window nor one head count: a
    gate is sized by the language model's key/value heads, and the model runs."""
    text = MistralConfig(**{**DECODER, "vocab_size": IMAGE_TOKEN + 1}, sliding_window=4)
    vlm = apply_value_path(tiny_vlm(text_config=text), "value_residual", 0.5, learnable="gate", stack=STACK)
    gates = [module.value_path_gate for module in vlm.modules() if hasattr(module, "value_path_gate")]
    assert len(gates) == 2 and all(gate.out_features == text.num_key_value_heads for gate in gates)
    with torch.no_grad():
        assert torch.isfinite(vlm(**tiny_vlm_inputs()).logits).all()


def _tiny_qwen2_vl_config() -> Qwen2VLConfig:
    text = dict(vocab_size=160, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4)
    rope = {"rope_type": "default", "mrope_section": [1, 1, 2], "rope_theta": 10000.0}
    vision = dict(depth=2, embed_dim=32, num_heads=4, hidden_size=32, mlp_ratio=2, patch_size=4, spatial_merge_size=2)
    return Qwen2VLConfig(
        text_config={**text, "num_key_value_heads": 2, "rope_parameters": rope},
        vision_config=vision,
        image_token_id=150,
        video_token_id=151,
        vision_start_token_id=152,
    )


def test_a_stack_whose_attention_is_called_once_per_image_is_refused_when_adapting():
    """Qwen2-VL's vision attention calls the interface once per image (outside flash attention): a second image in a
    batch would be a second call of the layer. It ran with one image and failed at the first batch of two; the loop in
    its source is refused when adapting, before anything changes."""
    model = Qwen2VLForConditionalGeneration(_tiny_qwen2_vl_config())
    with pytest.raises(ValueError, match=r"VisionAttention calls the attention interface in a loop \(once per image"):
        apply_value_path(model, "value_residual", stack="model.visual.blocks")
    assert not is_value_path_model(model)


def test_qwen2_vl_adapted_by_its_stack_generates_with_a_cache_as_without_and_saves_in_its_layout(tmp_path):
    """Another vision-language model: multimodal rotary positions, and a vision tower that calls attention once per
    image (through the wrapper, untouched). transformers renames Qwen2-VL's weights by class name on saving (`visual.*`,
    not `model.visual.*`): the adapted class saves the same names, so that the plain class and its backbone
    (`AutoModel`) find every weight."""
    config = _tiny_qwen2_vl_config()
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.tensor([[5, 152, 150, 7, 8, 9, 10], [6, 152, 150, 11, 12, 13, 14]])
    inputs = {
        "input_ids": input_ids,
        "mm_token_type_ids": (input_ids == 150).long(),
        "pixel_values": torch.randn(2 * 4, 3 * 2 * 4 * 4, generator=generator),  # two 8 px images, 2 × 2 patches each
        "image_grid_thw": torch.tensor([[1, 2, 2], [1, 2, 2]]),
    }
    outputs = {}
    for coefficient in (None, 0.0, 0.5):
        torch.manual_seed(0)
        model = Qwen2VLForConditionalGeneration(config).eval()
        if coefficient is not None:
            apply_value_path(model, "value_residual", coefficient, stack="model.language_model.layers")
        with torch.no_grad():
            outputs[coefficient] = model(**inputs).logits
            cached = model.generate(**inputs, max_new_tokens=4, do_sample=False)
            uncached = model.generate(**inputs, max_new_tokens=4, do_sample=False, use_cache=False)
        assert torch.equal(cached, uncached)
        model.save_pretrained(tmp_path / str(coefficient))
    assert torch.equal(outputs[0.0], outputs[None]) and (outputs[0.5] - outputs[None]).abs().max() > 1e-2
    native, adapted = (set(load_file(tmp_path / name / "model.safetensors")) for name in ("None", "0.5"))
    assert adapted == native | {MARKER} and "visual.patch_embed.proj.weight" in native
    for trust_remote_code in (False, True):
        _, info = AutoModel.from_pretrained(
            tmp_path / "0.5", trust_remote_code=trust_remote_code, output_loading_info=True
        )
        assert not info["missing_keys"]


@pytest.mark.parametrize("method", ["neutreno", "value_residual"])
def test_a_cache_stepped_by_hand_after_an_image_gives_the_full_forwards_logits(method):
    """The prompt with its image first, then one text token per call with the returned cache."""
    vlm, inputs = tiny_vlm(), tiny_vlm_inputs()
    apply_value_path(vlm, method, stack=STACK)
    input_ids, prefix = inputs["input_ids"], 18
    with torch.no_grad():
        full = vlm(**inputs).logits
        step = vlm(input_ids=input_ids[:, :prefix], pixel_values=inputs["pixel_values"], use_cache=True)
        logits = [step.logits]
        for position in range(prefix, input_ids.shape[1]):
            step = vlm(input_ids=input_ids[:, position : position + 1], **{CACHE_FIELD: step[CACHE_FIELD]})
            logits.append(step.logits)
    torch.testing.assert_close(torch.cat(logits, dim=1), full, rtol=0, atol=1e-5)


def test_the_other_towers_keep_their_attention_backend_and_remove_restores_the_stacks():
    """Only the named stack's sub-config takes the value path's implementation: a vision tower on eager stays on
    eager (it never sees the wrapper), and `remove_value_path` gives the language model its own backend back."""
    vlm, inputs = tiny_vlm(), tiny_vlm_inputs()
    vlm.set_attn_implementation({"vision_config": "eager"})
    with torch.no_grad():
        plain = vlm(**inputs).logits
    apply_value_path(vlm, "value_residual", stack=STACK)
    assert vlm.config.vision_config._attn_implementation == "eager"
    assert vlm.config.text_config._attn_implementation == "value_path-sdpa"
    remove_value_path(vlm)
    assert (vlm.config.text_config._attn_implementation, vlm.config.vision_config._attn_implementation) == (
        "sdpa",
        "eager",
    )
    with torch.no_grad():
        assert torch.equal(vlm(**inputs).logits, plain)


def test_lora_trains_saves_and_restores_a_stacks_learnable_coefficients(tmp_path):
    """PEFT on a model adapted by its stack, as on a model of one stack (tests/test_peft.py): the coefficients train
    beside LoRA with `modules_to_save=PEFT_MODULES`, and the adapter restores them onto a freshly adapted base."""
    from peft import LoraConfig, PeftModel, get_peft_model

    from hf_neutreno import learned_coefficients
    from hf_neutreno.value_path import PEFT_MODULES

    inputs = tiny_vlm_inputs()
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], modules_to_save=PEFT_MODULES)
    model = get_peft_model(apply_value_path(tiny_vlm(), "value_residual", 0.3, learnable=True, stack=STACK), lora)
    train_language_model(model, inputs, steps=3)
    trained = learned_coefficients(model)
    assert len(trained) == 2 and all(abs(value - 0.3) > 1e-3 for value in trained), trained
    with torch.no_grad():
        expected = model.eval()(**inputs).logits
    model.save_pretrained(tmp_path / "adapter")
    fresh = apply_value_path(tiny_vlm(), "value_residual", 0.3, learnable=True, stack=STACK)
    reloaded = PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval()
    assert learned_coefficients(reloaded) == trained
    with torch.no_grad():
        assert torch.equal(reloaded(**inputs).logits, expected)


@pytest.mark.slow  # every image-text-to-text class of the installed transformers, built tiny on the CPU: about 30 s
def test_every_vision_language_model_adapts_its_language_model_exactly_or_is_refused_by_name():
    """Each class that `AutoModelForImageTextToText` builds from its default config (shrunk, sub-configs too) and that
    runs a text-only forward natively: adapted at its language model's stack (the one the refusal without `stack`
    names), λ = 0 gives exactly the native logits and λ = 0.5 changes them; or `apply_value_path` refuses it with a
    `ValueError` (encoder-decoders, attention outside the interface). Never another exception."""
    import re
    import warnings

    from transformers import PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    from hf_neutreno.models.value_path import check_adaptable

    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    small |= dict(intermediate_size=64, depth=2, embed_dim=32, num_heads=4, out_hidden_size=32, projection_dim=32)

    def shrink(config):
        for name, value in small.items():
            if isinstance(getattr(config, name, None), int):
                setattr(config, name, value)
        for key in getattr(config, "sub_configs", None) or {}:
            if isinstance(getattr(config, key, None), PretrainedConfig):
                shrink(getattr(config, key))

    adapted = refused = 0
    for model_type in sorted(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                config = CONFIG_MAPPING[model_type]()
                shrink(config)
                torch.manual_seed(0)
                model = AutoModelForImageTextToText.from_config(config).eval()
            vocabulary = getattr(config.get_text_config(), "vocab_size", None) or 100
            input_ids = torch.randint(5, min(vocabulary, 200), (2, 6), generator=torch.Generator().manual_seed(0))
            with torch.no_grad():
                native = model(input_ids=input_ids).logits
        except Exception:  # a config that does not build shrunk, or a model that needs images: not the adapter's
            continue
        try:
            try:
                check_adaptable(model, "neutreno")
                stack = None
            except ValueError as error:
                named = re.search(r"stacks of layers \(([^)]*)\)", str(error))
                if named is None:
                    raise
                stacks = named.group(1).split(", ")
                stack = next((s for s in stacks if "language" in s or "text" in s), stacks[0])
            apply_value_path(model, "neutreno", 0.0, stack=stack)
            with torch.no_grad():
                assert torch.equal(model(input_ids=input_ids).logits, native), model_type
            remove_value_path(model)
            apply_value_path(model, "neutreno", 0.5, stack=stack)
            with torch.no_grad():
                assert (model(input_ids=input_ids).logits - native).abs().max() > 1e-4, model_type
            adapted += 1
        except ValueError:
            refused += 1
    assert adapted >= 30 and refused >= 5, (adapted, refused)


def test_automodel_loads_the_backbone_adapted_with_its_stack_from_the_task_models_root(tmp_path):
    """The stack is stored as a path from the saved model's root; `AutoModel` builds the backbone (the task model's
    `base_model_prefix` sub-model), where the same stack lies one level up."""
    vlm, inputs = tiny_vlm(), tiny_vlm_inputs()
    apply_value_path(vlm, "value_residual", 0.5, learnable=True, stack=STACK)
    vlm.save_pretrained(tmp_path / "vlm")
    backbone = AutoModel.from_pretrained(tmp_path / "vlm", trust_remote_code=True).eval()
    assert is_value_path_model(backbone) and backbone.config.value_path["stack"] == "language_model.layers"
    with torch.no_grad():
        expected = vlm(**inputs, output_hidden_states=True).hidden_states[-1]
        torch.testing.assert_close(backbone(**inputs, output_hidden_states=True).hidden_states[-1], expected)
    llama = apply_value_path(tiny_model("llama"), "neutreno", stack="model.layers")
    llama.save_pretrained(tmp_path / "llama")
    assert AutoModel.from_pretrained(tmp_path / "llama", trust_remote_code=True).config.value_path["stack"] == "layers"
