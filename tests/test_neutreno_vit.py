"""The NeuTRENO ViT against independent references: plain eager math of the paper's rule, and transformers' ViT."""

import math

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError
from transformers import ViTConfig, ViTForImageClassification

from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTForImageClassification, NeuTRENOViTModel
from tiny_models import (
    NEUTRENO_LAYER_CASES,
    TINY_VIT,
    assert_checkpointing_keeps_the_gradients,
    assert_config_edits_are_checked,
    assert_the_term_changes_the_output,
    count_rebuilds,
)

TINY = dict(TINY_VIT, num_hidden_layers=4, num_labels=3)
FP32_TOL = 1e-5  # fp32 accumulation-order noise between fused and eager kernels


def tiny_model(**overrides) -> NeuTRENOViTForImageClassification:
    torch.manual_seed(0)
    model = NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**{**TINY, **overrides})).eval()
    model.set_attn_implementation("eager")
    return model


def pixels(batch: int = 2, size: int = 16) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(1))


def reference_logits(model: NeuTRENOViTForImageClassification, x: torch.Tensor) -> torch.Tensor:
    """NeuTRENO's rule (paper eq. 26) in plain tensor math, one head at a time, from the raw parameters.

    For layer ℓ ≥ 1 in the NeuTRENO set, head h: U = softmax(Q Kᵀ/√d) V + λ (V_0 − V), added before the
    output projection; layer 0 runs plain attention and provides V_0.
    """
    cfg = model.config
    p = dict(model.named_parameters())
    n_heads, d_head = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
    w = p["vit.embeddings.patch_embeddings.projection.weight"]
    patches = torch.nn.functional.unfold(x, kernel_size=cfg.patch_size, stride=cfg.patch_size)  # (B, C*p*p, N)
    bias = p["vit.embeddings.patch_embeddings.projection.bias"]
    tokens = patches.transpose(1, 2) @ w.reshape(w.shape[0], -1).T + bias
    cls = p["vit.embeddings.cls_token"].expand(x.shape[0], 1, -1)
    h = torch.cat([cls, tokens], dim=1) + p["vit.embeddings.position_embeddings"]
    layers = cfg.neutreno_layers if cfg.neutreno_layers is not None else range(1, cfg.num_hidden_layers)

    def ln(t, name):
        weight, bias = p[name + ".weight"], p[name + ".bias"]
        return torch.nn.functional.layer_norm(t, t.shape[-1:], weight, bias, cfg.layer_norm_eps)

    def lin(t, name):
        return t @ p[name + ".weight"].T + p[name + ".bias"]

    v0 = None
    for i in range(cfg.num_hidden_layers):
        pre = f"vit.layers.{i}."
        a = ln(h, pre + "layernorm_before")
        k = lin(a, pre + "attention.k_proj")
        q = k if cfg.symmetric_attention else lin(a, pre + "attention.q_proj")
        v = lin(a, pre + "attention.v_proj")
        heads = []
        for j in range(n_heads):
            sl = slice(j * d_head, (j + 1) * d_head)
            qj, kj, vj = q[..., sl], k[..., sl], v[..., sl]
            if cfg.attention_kernel == "linear":
                fq, fk = torch.nn.functional.elu(qj) + 1, torch.nn.functional.elu(kj) + 1
                scores = fq @ fk.transpose(1, 2)
                attn = scores / scores.sum(-1, keepdim=True)
            else:
                attn = torch.softmax(qj @ kj.transpose(1, 2) / math.sqrt(d_head), dim=-1)
            u = attn @ vj
            if i in layers and cfg.neutreno_lambda:
                u = u + cfg.neutreno_lambda * (v0[..., sl] - vj)
            heads.append(u)
        if i == 0:
            v0 = v
        out = lin(torch.cat(heads, dim=-1), pre + "attention.o_proj")
        if cfg.featscale:
            mean = out.mean(dim=1, keepdim=True)
            out = out + p[pre + "attention.featscale_low"] * mean + p[pre + "attention.featscale_high"] * (out - mean)
        h = h + out
        h = h + lin(torch.nn.functional.gelu(lin(ln(h, pre + "layernorm_after"), pre + "mlp.fc1")), pre + "mlp.fc2")
    h = ln(h, "vit.layernorm")
    pooled = h[:, 1:].mean(1) if cfg.pooling == "mean" else h[:, 0]
    return lin(pooled, "classifier")


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param(dict(neutreno_lambda=0.6), id="all-layers"),
        *NEUTRENO_LAYER_CASES,
        pytest.param(dict(neutreno_lambda=0.6, symmetric_attention=True), id="symmetric"),
        pytest.param(dict(neutreno_lambda=0.6, attention_kernel="linear"), id="linear-kernel"),
        pytest.param(dict(neutreno_lambda=0.6, pooling="mean"), id="mean-pool"),
    ],
)
def test_neutreno_vit_equals_eager_reference(overrides):
    model = tiny_model(**overrides)
    x = pixels()
    with torch.no_grad():
        torch.testing.assert_close(model(x).logits, reference_logits(model, x), atol=FP32_TOL, rtol=0)


@pytest.mark.parametrize("overrides", [dict(neutreno_lambda=0.6), dict(neutreno_lambda=0.3, neutreno_layers=[2])])
def test_gradients_equal_the_eager_reference(overrides):
    """Training takes a memory-lean path (the projection input is recomputed in backward): same gradients."""
    model = tiny_model(**overrides).train()
    x = pixels()
    model(x).logits.square().sum().backward()
    ours = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    reference_logits(model, x).square().sum().backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(ours[name], param.grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_sdpa_training_rebuilds_the_backends_output_and_keeps_the_gradients(checkpointing, monkeypatch):
    """With SDPA, which keeps its output for the backward pass, each layer with the term rebuilds that output from the
    output with the term instead of keeping both (not under activation checkpointing, whose hooks must see every saved
    tensor): the gradients equal the eager reference's."""
    model = tiny_model(neutreno_lambda=0.6, neutreno_layers=[1, 3]).train()
    model.set_attn_implementation("sdpa")
    if checkpointing:
        model.activation_checkpointing_enable()
    x = pixels()
    rebuilt = count_rebuilds(monkeypatch, "hf_neutreno.models.neutreno_term")
    model(x).logits.square().sum().backward()
    assert len(rebuilt) == (0 if checkpointing else 2)
    ours = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    reference_logits(model, x).square().sum().backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(ours[name], param.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_an_output_projection_input_changed_in_place_is_an_error_not_a_wrong_gradient():
    """With a frozen output projection nothing saves its input, so autograd lets activation patching edit it in place;
    the rebuild of SDPA's output reads that input, so the edit must stop the backward pass rather than change the
    gradients. Without the edit the same step runs."""
    model = tiny_model(neutreno_lambda=0.6).train()
    model.set_attn_implementation("sdpa")
    for layer in model.vit.layers:
        layer.attention.o_proj.requires_grad_(False)
    model(pixels()).logits.square().sum().backward()

    def patch(module, args):
        args[0].add_(1.0)

    handle = model.vit.layers[1].attention.o_proj.register_forward_pre_hook(patch)
    with pytest.raises(RuntimeError, match="modified in place after the forward pass"):
        model(pixels()).logits.square().sum().backward()
    handle.remove()


def test_bf16_autocast_training_step_matches_fp32():
    model = tiny_model(neutreno_lambda=0.6).train()
    x = pixels()
    model(x).logits.square().sum().backward()
    fp32 = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).logits.float().square().sum()
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad.dtype == torch.float32, name
        scale = fp32[name].abs().max().clamp_min(1e-3)
        assert ((param.grad - fp32[name]).abs().max() / scale) < 0.1, name  # bf16 has ~3 significant digits


def test_featscale_equals_reference_with_nonzero_scales():
    model = tiny_model(neutreno_lambda=0.6, featscale=True)
    assert all(torch.all(p == 0) for n, p in model.named_parameters() if "featscale" in n), "FeatScale starts at 0"
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "featscale" in name:
                param.normal_()
        x = pixels()
        torch.testing.assert_close(model(x).logits, reference_logits(model, x), atol=FP32_TOL, rtol=0)


def test_the_term_changes_the_output():
    """Guards the reference test against a λ that is never applied."""
    assert_the_term_changes_the_output(tiny_model(neutreno_lambda=0.0), tiny_model(neutreno_lambda=0.6), pixels())


def test_lambda_zero_equals_native_vit_with_the_same_weights():
    vit_config = ViTConfig(**TINY, layer_norm_eps=1e-6, hidden_act="gelu", qkv_bias=True)
    torch.manual_seed(0)
    native = ViTForImageClassification(vit_config).eval()
    ours = NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**TINY, neutreno_lambda=0.0)).eval()
    ours.load_state_dict(native.state_dict(), strict=True)
    x = pixels(4)
    with torch.no_grad():
        diff = (ours(x).logits - native(x).logits).abs().max().item()
    assert diff <= 1e-5, diff


@pytest.mark.parametrize("backend", ["sdpa", pytest.param("flex_attention", marks=pytest.mark.slow)])
@pytest.mark.parametrize("neutreno_lambda", [0.0, 0.6])
def test_eager_and_other_backends_agree(neutreno_lambda, backend):
    model = tiny_model(neutreno_lambda=neutreno_lambda)
    x = pixels()
    logits = {}
    with torch.no_grad():  # flex attention on CPU has no backward (and compiles for most of a minute)
        for impl in ("eager", backend):
            model.set_attn_implementation(impl)
            logits[impl] = model(x).logits
    assert (logits[backend] - logits["eager"]).abs().max().item() <= FP32_TOL


def test_output_attentions_and_hidden_states():
    model = tiny_model()
    x = pixels()
    with torch.no_grad():
        out = model(x, output_attentions=True, output_hidden_states=True)
        as_tuple = model(x, output_hidden_states=True, return_dict=False)
    tokens = (16 // 4) ** 2 + 1
    assert len(out.attentions) == 4 and out.attentions[0].shape == (2, 4, tokens, tokens)
    torch.testing.assert_close(out.attentions[2].sum(-1), torch.ones(2, 4, tokens))  # rows of A are distributions
    assert len(out.hidden_states) == 5  # embeddings + every block
    assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[0], out.logits)


def test_gradient_reaches_layer_zero_values_from_later_layers():
    """V_0 is not detached: with λ > 0 the loss of later layers flows into layer 0's value projection."""
    model = tiny_model(neutreno_lambda=0.6, num_hidden_layers=3).train()
    x = pixels()
    # Remove layer 0's own path to the output so only V_0 (used by layers 1 and 2) can carry a gradient to v_proj.
    with torch.no_grad():
        model.vit.layers[0].attention.o_proj.weight.zero_()
    model(x).logits.sum().backward()
    grad = model.vit.layers[0].attention.v_proj.weight.grad
    assert grad is not None and grad.abs().sum() > 0

    plain = tiny_model(neutreno_lambda=0.0, num_hidden_layers=3).train()
    with torch.no_grad():
        plain.vit.layers[0].attention.o_proj.weight.zero_()
    plain(x).logits.sum().backward()
    assert plain.vit.layers[0].attention.v_proj.weight.grad.abs().sum() == 0  # so the gradient above is V_0's


def test_gradient_checkpointing_gives_the_same_gradients():
    assert_checkpointing_keeps_the_gradients(
        lambda: tiny_model(neutreno_lambda=0.6).train(), pixels(), labels=torch.tensor([0, 2])
    )


def test_drop_path_and_dropout_are_train_only():
    model = tiny_model(drop_path_rate=0.5, hidden_dropout_prob=0.2)
    x = pixels()
    with torch.no_grad():
        assert torch.equal(model(x).logits, model(x).logits)
        model.train()
        assert not torch.equal(model(x).logits, model(x).logits)
    rates = [layer.drop_path.drop_prob for layer in model.vit.layers[1:]]
    assert rates == sorted(rates) and rates[-1] == pytest.approx(0.5)  # linear in depth, as DeiT


def test_position_interpolation_for_other_sizes():
    model = tiny_model()
    with pytest.raises(ValueError, match="interpolate_pos_encoding"):
        model(pixels(size=24))
    with torch.no_grad():
        out = model(pixels(size=24), interpolate_pos_encoding=True)
        same = model(pixels(), interpolate_pos_encoding=True).logits
    assert out.logits.shape == (2, 3)
    torch.testing.assert_close(same, model(pixels()).logits.detach())  # the native size is unchanged


@pytest.mark.parametrize(
    "problem_type,labels,expected",
    [
        ("single_label_classification", torch.tensor([0, 2]), torch.nn.functional.cross_entropy),
        (
            "multi_label_classification",
            torch.tensor([[1.0, 0, 1], [0, 1, 0]]),
            torch.nn.functional.binary_cross_entropy_with_logits,
        ),
        ("regression", torch.tensor([[0.5, -1.0, 2.0], [1.0, 0.0, 0.0]]), torch.nn.functional.mse_loss),
    ],
)
def test_problem_types_use_the_native_losses(problem_type, labels, expected):
    model = tiny_model(problem_type=problem_type)
    out = model(pixels(), labels=labels)
    torch.testing.assert_close(out.loss, expected(out.logits, labels))


def test_presets():
    tiny = NeuTRENOViTConfig.from_preset("deit-tiny")
    assert (tiny.hidden_size, tiny.num_hidden_layers, tiny.num_attention_heads, tiny.patch_size, tiny.image_size) == (
        192,
        12,
        3,
        16,
        224,
    )
    assert NeuTRENOViTConfig.from_preset("deit-small").hidden_size == 384
    base = NeuTRENOViTConfig.from_preset("deit-base", neutreno_lambda=0.0)
    assert (base.hidden_size, base.num_attention_heads, base.neutreno_lambda) == (768, 12, 0.0)
    cifar = NeuTRENOViTConfig.from_preset("vit-tiny")
    assert (cifar.hidden_size, cifar.image_size, cifar.patch_size) == (192, 32, 4)
    with pytest.raises(ValueError, match="deit-small"):
        NeuTRENOViTConfig.from_preset("deit-huge")


@pytest.mark.parametrize(
    "overrides,field",
    [
        (dict(hidden_size=30, num_attention_heads=4), "num_attention_heads"),
        (dict(neutreno_lambda=-0.1), "neutreno_lambda"),
        (dict(neutreno_layers=[1, 4]), "neutreno_layers"),
        (dict(neutreno_layers=[0, 1]), "neutreno_layers"),
        (dict(attention_kernel="cosine"), "attention_kernel"),
        (dict(pooling="max"), "pooling"),
        (dict(image_size=18), "patch_size"),
    ],
)
def test_bad_configs_raise_naming_the_field(overrides, field):
    with pytest.raises(StrictDataclassError, match=field):
        NeuTRENOViTConfig(**{**TINY, **overrides})


def test_bad_inputs_raise_clear_errors():
    model = tiny_model()
    with pytest.raises(ValueError, match="image_size"):
        model(pixels(size=20))
    with pytest.raises(ValueError, match="num_channels"):
        model(torch.randn(1, 1, 16, 16))
    with pytest.raises(ValueError, match="attn_implementation|attention"):
        model.set_attn_implementation("not_a_kernel")
    assert_config_edits_are_checked(NeuTRENOViTConfig(**TINY), NeuTRENOViTModel, "neutreno_layers", [1, 2], 9)


def test_reset_classifier_keeps_the_backbone():
    model = tiny_model()
    before = model.vit.state_dict()
    model.reset_classifier(5, {i: str(i) for i in range(5)})
    assert model(pixels()).logits.shape == (2, 5) and model.config.num_labels == 5
    for name, tensor in model.vit.state_dict().items():
        assert torch.equal(tensor, before[name])
