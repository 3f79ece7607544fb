"""EigenViT (ViT⁻ / ViT⁺): the per-head parameterisation H_h = V_h diag(Λ_h) V_hᵀ, checked against plain math.

References are written here with numpy / plain matmuls from the raw parameters (Θ, ψ, q_proj, k_proj), never with
the model's own helpers. Tolerances: float32 forward passes compared with 1e-5 (accumulation order differs);
float64 numpy eigen/QR checks at 1e-5 on float32 inputs.
"""

import json

import numpy as np
import pytest
import torch
from huggingface_hub.errors import StrictDataclassError

import hf_neutreno
from fresh_process import make_local_hub_cache, run_fresh
from hf_neutreno import (
    EigenViTAttention,
    EigenViTConfig,
    EigenViTForImageClassification,
    EigenViTModel,
    NeuTRENOViTConfig,
    NeuTRENOViTForImageClassification,
)
from hf_neutreno.models.modeling_neutreno_vit import NeuTRENOViTAttention
from tiny_models import TINY_VIT, assert_checkpointing_keeps_the_gradients, training_args

TINY = dict(TINY_VIT, num_hidden_layers=2, num_attention_heads=2, num_labels=3)
SIGN = {"negative": -1.0, "positive": 1.0}
# The code files a NeuTRENO ViT checkpoint carries (with the value path, which a model file names for a checkpoint
# saved with one); an EigenViT's carries its own two more.
NEUTRENO_VIT_CODE = [
    "configuration_neutreno_vit.py",
    "modeling_neutreno_vit.py",
    "neutreno_common.py",
    "neutreno_term.py",
    "presets.py",
    "value_path.py",
    "value_path_defaults.py",
    "value_path_methods.py",
]


def tiny_config(**overrides) -> EigenViTConfig:
    return EigenViTConfig(**{**TINY, **overrides})


def eigen_attentions(model) -> list[EigenViTAttention]:
    return [m for m in model.modules() if isinstance(m, EigenViTAttention)]


def reference_factors(attention: EigenViTAttention) -> tuple[np.ndarray, np.ndarray]:
    """(V, Λ) from the raw Θ, ψ: numpy's QR with R's diagonal made positive (the unique QR), Λ = ±ψ² clipped."""
    V = []
    for theta in attention.theta.detach().double().numpy():
        q, r = np.linalg.qr(theta)
        V.append(q * np.where(np.diag(r) < 0, -1.0, 1.0))
    lam = SIGN[attention.config.spectrum_sign] * attention.psi.detach().double().numpy() ** 2
    if attention.config.eigenvalue_range is not None:
        lam = np.clip(lam, *attention.config.eigenvalue_range)
    return np.stack(V), lam


def reference_H(attention: EigenViTAttention) -> np.ndarray:
    """H_h = V_h diag(Λ_h) V_hᵀ."""
    V, lam = reference_factors(attention)
    return np.einsum("hdk,hk,hek->hde", V, lam, V)


def reference_attention(attention, x: torch.Tensor, first_layer_values=None, neutreno_lambda=0.0) -> torch.Tensor:
    """``Σ_h (A_h X V_h + λ (V0_h − X V_h)) diag(Λ_h) V_hᵀ + b`` with A_h = softmax(Q_h K_hᵀ / √d) in plain matmuls.

    With λ = 0 this is ``Σ_h A_h X H_h + b``, H_h built explicitly.
    """
    x64 = x.double()
    heads, head_dim = attention.config.num_attention_heads, attention.head_dim
    V, lam = map(torch.from_numpy, reference_factors(attention))
    H = torch.from_numpy(reference_H(attention))
    q = (x64 @ attention.q_proj.weight.double().T + attention.q_proj.bias.double()).unflatten(-1, (heads, head_dim))
    k = (x64 @ attention.k_proj.weight.double().T + attention.k_proj.bias.double()).unflatten(-1, (heads, head_dim))
    out = attention.output_bias.detach().double().expand_as(x64).clone()
    for h in range(heads):
        A = torch.softmax(q[..., h, :] @ k[..., h, :].transpose(-1, -2) / head_dim**0.5, dim=-1)
        out = out + A @ x64 @ H[h]
        if neutreno_lambda:
            v0 = first_layer_values.double()[..., h * head_dim : (h + 1) * head_dim]
            out = out + neutreno_lambda * (v0 - x64 @ V[h]) @ torch.diag(lam[h]) @ V[h].T
    return out


# --- configuration -------------------------------------------------------------------------------------------------


def test_presets_give_the_poster_shapes():
    cifar = EigenViTConfig.from_preset("vit-tiny")
    assert (cifar.hidden_size, cifar.num_hidden_layers, cifar.num_attention_heads) == (192, 12, 3)
    assert (cifar.image_size, cifar.patch_size, cifar.intermediate_size) == (32, 4, 768)
    big = EigenViTConfig.from_preset("vit-tiny-224", spectrum_sign="positive")
    assert (big.image_size, big.patch_size, big.spectrum_sign) == (224, 16, "positive")
    assert cifar.neutreno_lambda == 0.0 and cifar.eigen_layers is None and cifar.model_type == "eigen_vit"
    with pytest.raises(ValueError, match="vit-tiny"):
        EigenViTConfig.from_preset("vit-huge")


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(spectrum_sign="neg"), "spectrum_sign"),
        (dict(eigenvalue_range=[]), "eigenvalue_range"),
        (dict(eigenvalue_range=[0.0, -1.0]), "eigenvalue_range"),  # inverted
        (dict(eigenvalue_range=[-0.5, -0.5]), "eigenvalue_range"),  # empty interior
        (dict(eigenvalue_range=[-1.0, 0.0, 1.0]), "eigenvalue_range"),
        (dict(eigenvalue_range=[-1.0, float("nan")]), "eigenvalue_range"),
        (dict(eigenvalue_range=[0.0, 1.0]), "eigenvalue_range"),  # positive range for "negative"
        (dict(spectrum_sign="positive", eigenvalue_range=[-1.0, 0.0]), "eigenvalue_range"),
        (dict(eigenvalue_range=-1.0), "eigenvalue_range"),
        (dict(eigen_layers=[2]), "eigen_layers"),  # 2 layers: indices 0..1
        (dict(eigen_layers=[-1]), "eigen_layers"),
        (dict(eigen_layers=[0, 0]), "eigen_layers"),
        (dict(eigenvalue_init=0.0), "eigenvalue_init"),
        (dict(eigenvalue_range=[-1.0, -0.5]), "eigenvalue_init"),  # init −0.1 outside the range
        (dict(neutreno_lambda=-0.1), "neutreno_lambda"),
    ],
)
def test_bad_config_raises_naming_the_field(overrides, field):
    with pytest.raises(StrictDataclassError, match=field):
        tiny_config(**overrides)


def test_config_edited_after_construction_is_rejected():
    config = tiny_config()
    with pytest.raises(StrictDataclassError, match="spectrum_sign"):
        config.spectrum_sign = "sideways"  # refused where it is written
    config.eigen_layers = [0]
    config.eigen_layers.append(5)  # an in-place edit passes no check: building a model runs them all
    with pytest.raises(StrictDataclassError, match="eigen_layers"):
        EigenViTModel(config)


@pytest.mark.parametrize(
    "built, edit, message",
    [
        (  # ViT⁻ clipped to [-1, 0] made "positive": Λ = +ψ² clipped to [-1, 0] is 0, the attention branch off
            dict(eigenvalue_range=[-1.0, 0.0]),
            dict(spectrum_sign="positive"),
            r"`eigenvalue_range` crosses 0 against the sign: it must have low >= 0 for spectrum_sign='positive'",
        ),
        (  # ViT⁻ given a positive range: Λ = −ψ² clipped to [0.05, 1] is +0.05, a smoothing "negative" model
            dict(),
            dict(eigenvalue_range=[0.05, 1.0]),
            r"`eigenvalue_range` crosses 0 against the sign: it must have high <= 0 for spectrum_sign='negative'",
        ),
        (
            dict(),
            dict(eigenvalue_range=[-1.0, -0.5]),
            r"`eigenvalue_init` \(0.1\) puts the initial eigenvalues at -0.1, outside `eigenvalue_range`",
        ),
    ],
    ids=["sign against the range", "range against the sign", "init outside the range"],
)
def test_spectrum_edits_on_a_built_model_are_held_to_the_rule_across_fields(built, edit, message):
    """Each assignment passed its own field's rule, and the model ran with a spectrum against its sign; the rule
    across the fields is checked where they are read, at the forward. Editing both, one after the other, to a
    consistent pair works: the model then computes what a model built with them and the same weights computes."""
    torch.manual_seed(0)
    model = EigenViTForImageClassification(tiny_config(**built)).eval()
    pixel_values = torch.randn(2, 3, 16, 16)
    for name, value in edit.items():
        setattr(model.config, name, value)
    with pytest.raises(ValueError, match=message):
        model(pixel_values)
    model.config.eigenvalue_range, model.config.spectrum_sign = None, "positive"
    reference = EigenViTForImageClassification(tiny_config(spectrum_sign="positive")).eval()
    reference.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(model(pixel_values).logits, reference(pixel_values).logits, atol=0, rtol=0)


def test_config_round_trips_through_json(tmp_path):
    config = tiny_config(spectrum_sign="positive", eigenvalue_range=(0.0, 2.0), eigen_layers=[1])
    config.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["eigenvalue_range"] == [0.0, 2.0]
    loaded = EigenViTConfig.from_pretrained(tmp_path)
    assert (loaded.spectrum_sign, loaded.eigenvalue_range, loaded.eigen_layers) == ("positive", [0.0, 2.0], [1])


# --- initialisation and the spectrum -------------------------------------------------------------------------------


@pytest.mark.parametrize("sign", ["negative", "positive"])
def test_initialisation_is_an_orthonormal_frame_with_equal_eigenvalues(sign):
    model = EigenViTForImageClassification(tiny_config(spectrum_sign=sign, eigenvalue_init=0.3))
    for attention in eigen_attentions(model):
        theta = attention.theta.detach().double()
        gram = theta.transpose(1, 2) @ theta
        identity = torch.eye(attention.head_dim, dtype=torch.float64).expand_as(gram)
        torch.testing.assert_close(gram, identity, atol=1e-5, rtol=0)
        torch.testing.assert_close(
            attention.eigenvalues().detach(), torch.full_like(attention.psi, SIGN[sign] * 0.3), atol=1e-6, rtol=0
        )
        assert torch.count_nonzero(attention.output_bias) == 0
    # the two heads and the two layers get different random frames
    a, b = eigen_attentions(model)
    assert (a.theta - b.theta).abs().max() > 0.1 and (a.theta[0] - a.theta[1]).abs().max() > 0.1


def _push_eigenvalues(model, target_sign: float, steps: int = 8, fused: bool = False) -> None:
    """AdamW steps on the task loss minus ``target_sign · Σ trace(H_h)``: Λ is driven towards ``target_sign · ∞``."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.2, weight_decay=0.0, fused=fused)
    pixel_values = torch.randn(4, 3, 16, 16)
    labels = torch.tensor([0, 1, 2, 0])
    for _ in range(steps):
        loss = model(pixel_values, labels=labels).loss
        trace = sum(a.value_output_product().diagonal(dim1=1, dim2=2).sum() for a in eigen_attentions(model))
        loss = loss - target_sign * trace
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@pytest.mark.parametrize(
    "sign, eigenvalue_range",
    [("negative", None), ("negative", [-1.0, 0.0]), ("positive", None), ("positive", [0.0, 1.0])],
)
def test_every_eigenvalue_keeps_its_sign_and_range_at_init_and_after_optimizer_steps(sign, eigenvalue_range):
    model = EigenViTForImageClassification(tiny_config(spectrum_sign=sign, eigenvalue_range=eigenvalue_range))
    low, high = eigenvalue_range if eigenvalue_range else (-np.inf, 0.0) if sign == "negative" else (0.0, np.inf)
    before = [a.eigenvalues().detach().clone() for a in eigen_attentions(model)]
    # push towards the forbidden sign, then outwards past ±1; check after each
    for stage, target in (("init", None), ("pushed to the wrong sign", -SIGN[sign]), ("pushed outwards", SIGN[sign])):
        if target is not None:
            _push_eigenvalues(model, target)
        for attention in eigen_attentions(model):
            # all `hidden` eigenvalues of each symmetric H_h, from the numpy reference (its zeros included)
            eig = np.linalg.eigvalsh(reference_H(attention))
            assert eig.min() >= low - 1e-6 and eig.max() <= high + 1e-6, (stage, eig.min(), eig.max())
            lam = attention.eigenvalues().detach()
            assert lam.min() >= low and lam.max() <= high, stage
    after = [a.eigenvalues().detach() for a in eigen_attentions(model)]
    assert all((a - b).abs().max() > 0.5 for a, b in zip(after, before)), "the optimizer did not move Λ"
    if eigenvalue_range:  # the outward push went past ±1: the clip must be active
        bound = low if sign == "negative" else high
        assert all(torch.isclose(a, torch.tensor(bound)).any() for a in after)


@pytest.mark.parametrize("fused", [False, True])
def test_eigenbasis_columns_are_orthonormal_after_training(fused):
    model = EigenViTForImageClassification(tiny_config())
    _push_eigenvalues(model, -1.0, steps=5, fused=fused)
    for attention in eigen_attentions(model):
        basis = attention.eigenbasis().detach()
        identity = torch.eye(attention.head_dim).expand(attention.num_heads, -1, -1)
        torch.testing.assert_close(basis.transpose(1, 2) @ basis, identity, atol=1e-5, rtol=0)
        # Θ itself is no longer orthonormal: the QR is doing work
        theta = attention.theta.detach()
        assert ((theta.transpose(1, 2) @ theta) - identity).abs().max() > 1e-2


# --- the layer computes what it claims ---------------------------------------------------------------------------


def test_value_output_product_matches_numpy_reference():
    model = EigenViTForImageClassification(tiny_config(eigenvalue_range=[-1.0, 0.0]))
    _push_eigenvalues(model, -1.0, steps=3)
    for attention in eigen_attentions(model):
        H = attention.value_output_product().detach().double().numpy()
        np.testing.assert_allclose(H, reference_H(attention), atol=1e-5)
        np.testing.assert_allclose(H, H.transpose(0, 2, 1), atol=1e-6)  # symmetric by construction
        assert attention.eigenvalues().shape == (attention.num_heads, attention.head_dim)
        assert H.shape == (attention.num_heads, attention.config.hidden_size, attention.config.hidden_size)


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_layer_output_is_sum_of_A_X_H_plus_bias(backend):
    """The layer applies exactly `value_output_product()`: output = Σ_h A_h X H_h + b, A_h from the layer itself."""
    config = tiny_config(spectrum_sign="positive")
    config._attn_implementation = backend
    model = EigenViTForImageClassification(config)
    _push_eigenvalues(model, 1.0, steps=3)  # Θ away from orthonormal, Λ unequal
    attention = eigen_attentions(model)[1]
    with torch.no_grad():
        attention.output_bias.normal_()
    x = torch.randn(3, 17, config.hidden_size)
    output, _, values = attention(x)
    config._attn_implementation = "eager"
    _, maps, _ = attention(x)
    H = attention.value_output_product().detach()
    expected = torch.einsum("bhij,bjd,hde->bie", maps, x, H) + attention.output_bias
    torch.testing.assert_close(output, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(values, x @ attention.eigenbasis().transpose(0, 1).reshape(config.hidden_size, -1))


@pytest.mark.parametrize("neutreno_lambda", [0.0, 0.6])
def test_attention_equals_explicit_reference(neutreno_lambda):
    config = tiny_config(neutreno_lambda=neutreno_lambda, eigenvalue_range=[-2.0, 0.0])
    model = EigenViTForImageClassification(config)
    _push_eigenvalues(model, -1.0, steps=3)
    attention = eigen_attentions(model)[1]
    assert attention.neutreno_lambda == neutreno_lambda
    with torch.no_grad():
        attention.output_bias.normal_()
    x = torch.randn(2, 17, config.hidden_size)
    first_layer_values = torch.randn(2, 17, config.hidden_size)
    output, _, _ = attention(x, None, first_layer_values)
    expected = reference_attention(attention, x, first_layer_values, neutreno_lambda)
    torch.testing.assert_close(output.double(), expected, atol=1e-5, rtol=1e-5)


def test_gradients_with_the_neutreno_term_equal_plain_autograd():
    """Training recomputes the output projection's input in backward (no activation kept for the term); the
    gradients for the input, V_0, Θ, ψ and the bias equal plain autograd through the explicit formula, in float64."""
    config = tiny_config(neutreno_lambda=0.6, eigenvalue_range=[-2.0, 0.0])
    model = EigenViTForImageClassification(config).double().train()
    attention = eigen_attentions(model)[1]
    with torch.no_grad():
        attention.theta.add_(0.3 * torch.randn_like(attention.theta))
        attention.psi.normal_()  # some Λ = −ψ² beyond −2: clipped, so no gradient for those ψ
        attention.output_bias.normal_()
    x = torch.randn(2, 17, config.hidden_size, dtype=torch.float64, requires_grad=True)
    first_layer_values = torch.randn(2, 17, config.hidden_size, dtype=torch.float64, requires_grad=True)
    cotangent = torch.randn(2, 17, config.hidden_size, dtype=torch.float64)
    leaves = [x, first_layer_values, attention.theta, attention.psi, attention.output_bias]
    output, _, _ = attention(x, None, first_layer_values)
    ours = torch.autograd.grad((output * cotangent).sum(), leaves)

    heads, head_dim = config.num_attention_heads, attention.head_dim
    q, r = torch.linalg.qr(attention.theta)
    V = q * torch.sign(r.diagonal(dim1=-2, dim2=-1)).unsqueeze(-2)
    lam = (-attention.psi.square()).clamp(-2.0, 0.0)
    queries = attention.q_proj(x).unflatten(-1, (heads, head_dim))
    keys = attention.k_proj(x).unflatten(-1, (heads, head_dim))
    expected = attention.output_bias
    for h in range(heads):
        A = torch.softmax(queries[..., h, :] @ keys[..., h, :].transpose(-1, -2) / head_dim**0.5, dim=-1)
        values = x @ V[h]
        v0 = first_layer_values[..., h * head_dim : (h + 1) * head_dim]
        expected = expected + (A @ values + 0.6 * (v0 - values)) @ torch.diag(lam[h]) @ V[h].T
    torch.testing.assert_close(output, expected, atol=1e-10, rtol=0)
    reference = torch.autograd.grad((expected * cotangent).sum(), leaves)
    for name, got, want in zip(["x", "V_0", "theta", "psi", "output_bias"], ours, reference):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-8, msg=name)
    assert (ours[3] == 0).any() and (ours[3] != 0).any()  # the clip is active for some ψ, not all


def test_only_eigen_layers_are_reparameterised_and_the_rest_is_the_neutreno_vit():
    config = tiny_config(num_hidden_layers=3, eigen_layers=[1])
    model = EigenViTForImageClassification(config)
    kinds = [type(layer.attention) for layer in model.vit.layers]
    assert kinds == [NeuTRENOViTAttention, EigenViTAttention, NeuTRENOViTAttention]
    # with no eigen layer, the model is the plain ViT: same weights, same logits as the NeuTRENO ViT at λ = 0
    plain = EigenViTForImageClassification(tiny_config(eigen_layers=[])).eval()
    reference = NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**TINY, neutreno_lambda=0.0)).eval()
    reference.load_state_dict(plain.state_dict())
    pixel_values = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(plain(pixel_values).logits, reference(pixel_values).logits, atol=0, rtol=0)


@pytest.mark.parametrize("use_reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_gradient_checkpointing_gives_the_same_gradients(use_reentrant):
    """Both kinds of activation checkpointing (the reentrant one used to fail in backward: the batched QR's graph was
    shared by every checkpointed block and freed by the first)."""

    def make_model():
        torch.manual_seed(0)
        return EigenViTForImageClassification(tiny_config(neutreno_lambda=0.5)).train()

    pixel_values = torch.randn(2, 3, 16, 16, requires_grad=use_reentrant)  # reentrant needs an input with gradients
    model = assert_checkpointing_keeps_the_gradients(
        make_model, pixel_values, labels=torch.tensor([0, 2]), use_reentrant=use_reentrant
    )
    assert model.vit.layers[0].attention.theta.grad is not None


# --- no hidden state: the weights are made in every forward, nothing is kept -----------------------------------


@pytest.fixture
def qr_calls(monkeypatch):
    calls = []
    qr = torch.linalg.qr

    def counting_qr(*args, **kwargs):
        calls.append(1)
        return qr(*args, **kwargs)

    monkeypatch.setattr(torch.linalg, "qr", counting_qr)
    return calls


def attributes(module: torch.nn.Module) -> dict:
    """Everything a forward could leave on a module, by identity: its attributes and the entries of its dicts
    (parameters, buffers, submodules, hooks)."""
    return {
        name: {key: id(entry) for key, entry in value.items()} if isinstance(value, dict) else id(value)
        for name, value in vars(module).items()
    }


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_one_batched_qr_per_forward_for_all_layers_and_nothing_kept(qr_calls, mode):
    """Every forward, with gradients or without, makes the weights of every eigen layer with one QR (batched over
    layers and heads) and leaves nothing behind on any module."""
    model = EigenViTForImageClassification(tiny_config(num_hidden_layers=3, eigen_layers=[0, 2])).train(mode == "train")
    pixel_values = torch.randn(2, 3, 16, 16)
    qr_calls.clear()
    before = [attributes(m) for m in model.modules()]
    model(pixel_values, labels=torch.tensor([0, 1])).loss.backward()
    assert len(qr_calls) == 1  # both eigen layers at once
    with torch.no_grad():
        model(pixel_values)
    with torch.inference_mode():
        model(pixel_values)
    assert len(qr_calls) == 3
    assert [attributes(m) for m in model.modules()] == before


def weight_changes():
    """Every way a user's code changes weights in place, as (name, function of the model and a donor model with
    other weights of the same shapes)."""

    def data_copy(model, donor):  # what EMA, weight averaging and some loaders do: no version-counter bump
        for p, q in zip(model.parameters(), donor.parameters()):
            p.data.copy_(q.data)

    def lerp_under_no_grad(model, donor):  # an EMA update
        with torch.no_grad():
            for p, q in zip(model.parameters(), donor.parameters()):
                p.lerp_(q, 0.5)

    def optimizer_step(model, donor):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        model(torch.randn(2, 3, 16, 16), labels=torch.tensor([0, 1])).loss.backward()
        optimizer.step()

    return {
        "load_state_dict": lambda model, donor: model.load_state_dict(donor.state_dict()),
        "data.copy_": data_copy,
        "lerp_ under no_grad": lerp_under_no_grad,
        "optimizer step": optimizer_step,
        "to(float64)": lambda model, donor: model.to(torch.float64),
    }


@pytest.mark.parametrize("change", list(weight_changes()))
@pytest.mark.parametrize("context", ["no_grad", "inference_mode"])
def test_after_any_weight_change_the_model_equals_a_fresh_one_with_the_same_weights(change, context):
    """The weight-change contract: after a forward without gradients (which a cache would have kept), each way of
    changing the weights gives the logits of a freshly built model holding the resulting weights."""
    config = tiny_config()
    torch.manual_seed(0)
    model = EigenViTForImageClassification(config).eval()
    donor = EigenViTForImageClassification(config).eval()
    pixel_values = torch.randn(2, 3, 16, 16)
    no_grad = torch.no_grad if context == "no_grad" else torch.inference_mode
    with no_grad():
        before = model(pixel_values).logits
    weight_changes()[change](model, donor)  # in eval mode throughout: `train()` / `eval()` would hide a stale copy
    fresh = EigenViTForImageClassification(config).to(next(model.parameters()).dtype).eval()
    fresh.load_state_dict(model.state_dict())
    with no_grad():
        inputs = pixel_values.to(next(model.parameters()).dtype)
        after, expected = model(inputs).logits, fresh(inputs).logits
    if change != "to(float64)":  # the same weights in another dtype: nearly the same logits
        assert not torch.allclose(after, before)  # the change reached the logits
    torch.testing.assert_close(after, expected, atol=0, rtol=0)


@pytest.mark.parametrize("fused", [False, True])
def test_eval_logits_follow_optimizer_steps_and_load_state_dict(fused):
    """Eval forwards see the current Θ, ψ: after a (fused) AdamW step and after `load_state_dict` they give the logits
    of a freshly built model holding the same weights."""
    config = tiny_config()
    model = EigenViTForImageClassification(config).eval()
    pixel_values = torch.randn(2, 3, 16, 16)

    def fresh_logits(state_dict):
        fresh = EigenViTForImageClassification(config).eval()
        fresh.load_state_dict(state_dict)
        return fresh(pixel_values).logits

    with torch.no_grad():
        before = model(pixel_values).logits
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=fused)
    model(pixel_values, labels=torch.tensor([0, 1])).loss.backward()  # eval mode, gradients on
    optimizer.step()
    with torch.no_grad():
        after = model(pixel_values).logits
        assert not torch.allclose(before, after)
        torch.testing.assert_close(after, fresh_logits(model.state_dict()), atol=0, rtol=0)
        other = EigenViTForImageClassification(config).eval()
        model.load_state_dict(other.state_dict())
        torch.testing.assert_close(model(pixel_values).logits, other(pixel_values).logits, atol=0, rtol=0)


def test_eval_forward_with_gradients_reaches_theta_and_psi():
    model = EigenViTForImageClassification(tiny_config()).eval()
    with torch.no_grad():
        model(torch.randn(2, 3, 16, 16))
    model(torch.randn(2, 3, 16, 16), labels=torch.tensor([0, 1])).loss.backward()
    for attention in eigen_attentions(model):
        assert attention.theta.grad.abs().max() > 0 and attention.psi.grad.abs().max() > 0


# --- the export to a NeuTRENO ViT ------------------------------------------------------------------------------

EXPORT_CASES = {
    "ViT-": dict(),
    "ViT+": dict(spectrum_sign="positive"),
    "ViT- clipped": dict(eigenvalue_range=[-0.3, 0.0]),
    "ViT+ clipped": dict(spectrum_sign="positive", eigenvalue_range=[0.05, 0.3]),
    "eigen layer 1 of 3, λ = 0.6": dict(num_hidden_layers=3, eigen_layers=[1], neutreno_lambda=0.6),
    "eigen layers 0 and 2, λ = 0.4 in layer 2": dict(
        num_hidden_layers=3, eigen_layers=[0, 2], neutreno_lambda=0.4, neutreno_layers=[2]
    ),
    "no qkv bias, λ = 0.5": dict(qkv_bias=False, neutreno_lambda=0.5),
}


def trained_eigen_model(model_class=EigenViTForImageClassification, **overrides):
    """A model whose Θ is no longer orthonormal, whose Λ differ (and hit the clip where there is one), with biases."""
    config = tiny_config(**overrides)
    classifier = EigenViTForImageClassification(config)
    _push_eigenvalues(classifier, SIGN[config.spectrum_sign], steps=4)
    with torch.no_grad():
        for attention in eigen_attentions(classifier):
            attention.output_bias.normal_()
    if model_class is EigenViTForImageClassification:
        return classifier.eval()
    backbone = model_class(config)
    backbone.load_state_dict(classifier.vit.state_dict())
    return backbone.eval()


def head_products(attention) -> np.ndarray:
    """W_V^h W_O^h of every head of a plain attention, from its `nn.Linear` weights: (heads, hidden, hidden)."""
    heads, head_dim = attention.config.num_attention_heads, attention.head_dim
    value = attention.v_proj.weight.detach().double().view(heads, head_dim, -1).transpose(1, 2)
    output = attention.o_proj.weight.detach().double().view(-1, heads, head_dim).permute(1, 2, 0)
    return (value @ output).numpy()


@pytest.mark.parametrize("case", EXPORT_CASES)
def test_to_neutreno_vit_gives_a_neutreno_vit_with_the_same_logits_and_head_products(case):
    model = trained_eigen_model(**EXPORT_CASES[case])
    if model.config.eigenvalue_range is not None:  # the clip is active in at least one layer
        assert any((a.psi.detach().square() > 0.3).any() for a in eigen_attentions(model))
    exported = model.to_neutreno_vit()
    assert type(exported) is NeuTRENOViTForImageClassification and not exported.training
    config = exported.config
    assert type(config) is NeuTRENOViTConfig and config.model_type == "neutreno_vit"
    for field in ("neutreno_lambda", "neutreno_layers", "qkv_bias", "num_hidden_layers", "id2label"):
        assert getattr(config, field) == getattr(model.config, field), field
    assert not {"spectrum_sign", "eigenvalue_range", "eigen_layers", "eigenvalue_init"} & set(config.to_dict())
    pixel_values = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(exported(pixel_values).logits, model(pixel_values).logits, atol=1e-5, rtol=0)
    for layer, source in zip(exported.vit.layers, model.vit.layers):
        if isinstance(source.attention, EigenViTAttention):
            np.testing.assert_allclose(head_products(layer.attention), reference_H(source.attention), atol=1e-5)
            torch.testing.assert_close(layer.attention.o_proj.bias, source.attention.output_bias, atol=0, rtol=0)
            if config.qkv_bias:
                assert torch.count_nonzero(layer.attention.v_proj.bias) == 0
        else:
            for name, weight in source.attention.state_dict().items():
                torch.testing.assert_close(layer.attention.state_dict()[name], weight, atol=0, rtol=0)


def test_backbone_exports_to_the_neutreno_vit_backbone():
    model = trained_eigen_model(EigenViTModel, neutreno_lambda=0.6)
    exported = model.to_neutreno_vit()
    assert type(exported).__name__ == "NeuTRENOViTModel"
    pixel_values = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected, got = model(pixel_values), exported(pixel_values)
    torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state, atol=1e-5, rtol=0)
    torch.testing.assert_close(got.pooler_output, expected.pooler_output, atol=1e-5, rtol=0)


# --- checkpoints and training ------------------------------------------------------------------------------------


def test_fresh_process_loads_the_checkpoint_with_remote_code(tmp_path):
    config = tiny_config(eigen_layers=[1], spectrum_sign="positive", eigenvalue_range=[0.0, 1.0])
    config.id2label = {0: "cat", 1: "dog", 2: "ship"}
    config.label2id = {v: k for k, v in config.id2label.items()}
    model = EigenViTForImageClassification(config).eval()
    _push_eigenvalues(model, 1.0, steps=2)
    model.eval()
    pixel_values = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        logits = model(pixel_values).logits
    model.save_pretrained(tmp_path / "ckpt")
    torch.save(pixel_values, tmp_path / "pixels.pt")
    saved = sorted(p.name for p in (tmp_path / "ckpt").glob("*.py"))
    assert saved == sorted(NEUTRENO_VIT_CODE + ["configuration_eigen_vit.py", "modeling_eigen_vit.py"])
    make_local_hub_cache(tmp_path / "hf_home", "someone/eigen-vit-tiny", tmp_path / "ckpt")
    out = run_fresh(
        """
        import torch
        from transformers import AutoModel, AutoModelForImageClassification
        pixels = torch.load("pixels.pt")
        for i, source in enumerate(["ckpt", "someone/eigen-vit-tiny"]):  # local folder, then the (cached) Hub
            model = AutoModelForImageClassification.from_pretrained(source, trust_remote_code=True).eval()
            assert type(model).__name__ == "EigenViTForImageClassification", type(model)
            assert "hf_neutreno" not in type(model).__module__
            with torch.no_grad():
                torch.save(model(pixels).logits, f"fresh_logits_{i}.pt")
                torch.save(model.to_neutreno_vit()(pixels).logits, f"exported_logits_{i}.pt")  # the export, too
        print(model.config.id2label[1], type(AutoModel.from_pretrained("ckpt", trust_remote_code=True)).__name__)
        """,
        tmp_path,
    )
    assert out.split() == ["dog", "EigenViTModel"]
    for i in range(2):
        assert torch.equal(torch.load(tmp_path / f"fresh_logits_{i}.pt"), logits)
        torch.testing.assert_close(torch.load(tmp_path / f"exported_logits_{i}.pt"), logits, atol=1e-5, rtol=0)
    # in this process (package installed) the registered classes load it, with Θ, ψ not re-initialised
    reloaded = EigenViTForImageClassification.from_pretrained(tmp_path / "ckpt").eval()
    with torch.no_grad():
        assert torch.equal(reloaded(pixel_values).logits, logits)


def test_exported_model_is_a_neutreno_vit_checkpoint_that_loads_with_remote_code(tmp_path):
    model = trained_eigen_model(eigen_layers=[1], neutreno_lambda=0.6)
    pixel_values = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        logits = model(pixel_values).logits
    model.to_neutreno_vit().save_pretrained(tmp_path / "ckpt")
    torch.save(pixel_values, tmp_path / "pixels.pt")
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("*.py")) == NEUTRENO_VIT_CODE
    out = run_fresh(
        """
        import torch
        from transformers import AutoModelForImageClassification
        model = AutoModelForImageClassification.from_pretrained("ckpt", trust_remote_code=True).eval()
        with torch.no_grad():
            torch.save(model(torch.load("pixels.pt")).logits, "fresh_logits.pt")
        print(type(model).__name__, model.config.neutreno_lambda)
        """,
        tmp_path,
    )
    assert out.split() == ["NeuTRENOViTForImageClassification", "0.6"]
    torch.testing.assert_close(torch.load(tmp_path / "fresh_logits.pt"), logits, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_trainer_on_cifar10_subset_lowers_the_loss(data_dir, tmp_path):
    from transformers import Trainer, ViTImageProcessorPil

    from hf_neutreno.data.loading import get_split, image_and_label_columns, load_image_dataset, subset

    dataset = load_image_dataset(data_dir / "cifar10")
    image_col, label_col = image_and_label_columns(dataset)
    train = subset(get_split(dataset, "train"), 128, seed=0)
    processor = ViTImageProcessorPil(size={"height": 32, "width": 32})

    def transform(batch):
        pixel_values = processor(batch[image_col], return_tensors="pt")["pixel_values"]
        return {"pixel_values": pixel_values, "labels": batch[label_col]}

    train = train.with_transform(transform)
    config = EigenViTConfig.from_preset(
        "vit-tiny",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        num_labels=10,
        eigenvalue_range=[-1.0, 0.0],
    )
    model = EigenViTForImageClassification(config)
    args = training_args(
        tmp_path,
        per_device_train_batch_size=32,
        per_device_eval_batch_size=64,
        max_steps=40,
        learning_rate=2e-3,
        warmup_steps=0,
        logging_steps=10,
        remove_unused_columns=False,
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=train)
    before = trainer.evaluate()["eval_loss"]
    trainer.train()
    after = trainer.evaluate()["eval_loss"]
    assert after < 0.8 * before, (before, after)
    for attention in eigen_attentions(model):  # the constraint held through training
        assert -1.0 <= attention.eigenvalues().min() and attention.eigenvalues().max() <= 0.0


def test_package_exports_and_auto_registration():
    from transformers import AutoConfig, AutoModel, AutoModelForImageClassification

    config = AutoConfig.for_model("eigen_vit", **TINY)
    assert type(config) is EigenViTConfig
    assert type(AutoModel.from_config(config)) is EigenViTModel
    assert type(AutoModelForImageClassification.from_config(config)) is EigenViTForImageClassification
    assert {"EigenViTConfig", "EigenViTModel", "EigenViTForImageClassification"} <= set(hf_neutreno.__all__)
