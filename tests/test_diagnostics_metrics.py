"""Each over-smoothing metric against its definition, on hand-made tensors with known answers and on random tensors
with padding (the reference is written here as the papers state it: explicit pairs, explicit matrices, an SVD)."""

import math

import pytest
import torch

from hf_neutreno.diagnostics.metrics import (
    attention_map_similarity,
    attention_probabilities,
    attention_scores,
    effective_rank,
    functional_j,
    gradient_alignment,
    hfc_lfc_ratio,
    hidden_state_metrics,
    rank_one_distance,
    token_cosine_similarity,
)
from hf_neutreno.names import METRICS, check_metrics

# float32 metrics on O(1) values: 1e-5 absolute covers rounding in sums over ≤ 64 tokens.
ATOL = 1e-5


def test_identical_tokens_are_fully_smoothed():
    x = torch.tensor([0.3, -1.2, 2.0, 0.7]).expand(1, 9, 4).clone()  # 9 copies of one token
    assert token_cosine_similarity(x).item() == pytest.approx(1.0, abs=ATOL)
    assert hfc_lfc_ratio(x).item() == pytest.approx(0.0, abs=ATOL)
    assert rank_one_distance(x).item() == pytest.approx(0.0, abs=ATOL)
    assert effective_rank(x).item() == pytest.approx(1.0, abs=1e-4)


def test_orthogonal_tokens():
    n = 6
    x = (3.0 * torch.eye(n)).unsqueeze(0)  # tokens e_1..e_n: pairwise orthogonal, equal singular values
    assert token_cosine_similarity(x).item() == pytest.approx(0.0, abs=ATOL)
    # x̄ = (3/n)·1: ‖LFC‖ = √n·3/√n = 3, ‖X‖ = 3√n, ‖HFC‖² = 9n − 9.
    assert hfc_lfc_ratio(x).item() == pytest.approx(math.sqrt(n - 1), rel=1e-5)
    assert rank_one_distance(x).item() == pytest.approx(math.sqrt((n - 1) / n), rel=1e-5)
    assert effective_rank(x).item() == pytest.approx(n, rel=1e-5)


def test_opposite_tokens_have_cosine_minus_one():
    x = torch.tensor([[[1.0, 2.0], [-1.0, -2.0]]])
    assert token_cosine_similarity(x).item() == pytest.approx(-1.0, abs=ATOL)
    assert math.isnan(hfc_lfc_ratio(x).item())  # mean token 0: no low-frequency part, ratio undefined


def _direct(x: torch.Tensor) -> dict[str, float]:
    """The definitions, on one sample's real tokens (N × d), in float64 with explicit pairs and matrices."""
    x = x.double()
    n = x.shape[0]
    cos = sum(torch.dot(x[i], x[j]) / (x[i].norm() * x[j].norm()) for i in range(n) for j in range(n) if i != j) / (
        n * (n - 1)
    )
    ones = torch.ones(n, 1, dtype=x.dtype)
    lfc = ones @ ones.T @ x / n
    hfc = (torch.eye(n, dtype=x.dtype) - ones @ ones.T / n) @ x
    s = torch.linalg.svdvals(x)
    p = s / s.sum()
    return {
        "cosine_similarity": float(cos),
        "hfc_lfc_ratio": float(torch.linalg.norm(hfc) / torch.linalg.norm(lfc)),
        "rank_one_distance": float(torch.linalg.norm(x - ones @ x.mean(0, keepdim=True)) / torch.linalg.norm(x)),
        "effective_rank": float(torch.exp(-(p * p.log()).sum())),
    }


@pytest.mark.parametrize("tokens, dim", [(11, 5), (5, 11)])  # both Gram orientations of the effective rank
def test_hidden_state_metrics_equal_direct_computation_with_padding(tokens, dim):
    x = torch.randn(3, tokens, dim) + 0.5  # an offset, so that the mean token matters
    mask = torch.ones(3, tokens, dtype=torch.long)
    mask[1, tokens - 2 :] = 0  # right padding
    mask[2, :3] = 0  # left padding
    x[mask == 0] = 1e3  # garbage in padded positions must not leak into any metric
    got = hidden_state_metrics(x, mask, METRICS)
    for b in range(3):
        expected = _direct(x[b][mask[b].bool()])
        for name, value in expected.items():
            assert got[name][b].item() == pytest.approx(value, rel=1e-4, abs=ATOL), (name, b)


def test_one_token_sequences_are_undefined_for_the_cosine():
    x = torch.randn(2, 4, 3)
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1]])
    values = token_cosine_similarity(x, mask)
    assert math.isnan(values[0].item()) and not math.isnan(values[1].item())


def test_effective_rank_of_nearly_identical_tokens_is_accurate():
    # Over-smoothed states: one dominant token plus a tiny spread. A float32 Gram matrix would report ~1.14 for an
    # exact rank-one matrix; the split into mean and centred parts keeps the float64 SVD's answer.
    base = torch.randn(1, 1, 64).expand(2, 70, 64) * 10
    x = base + torch.cat([torch.zeros(1, 70, 64), 1e-3 * torch.randn(1, 70, 64)])
    for b in range(2):
        s = torch.linalg.svdvals(x[b].double())
        p = s / s.sum()
        expected = float(torch.exp(-(torch.special.xlogy(p, p)).sum()))
        assert effective_rank(x[b : b + 1]).item() == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("tokens, dim", [(197, 192), (18, 32)])  # DeiT-tiny's size; the N × N Gram matrix
def test_effective_rank_of_rank_one_states_is_one(tokens, dim):
    # Tokens that are multiples of one vector, x_i = a_i b: X is rank one, and so is its centred part, whose float32
    # products added rounding noise as spurious singular values (1.027 at DeiT-tiny's size, 1.003 at 18 × 32).
    torch.manual_seed(4)
    x = (1 + 0.5 * torch.randn(2, tokens, 1)) * (3 * torch.randn(2, 1, dim))
    mask = torch.ones(2, tokens)
    mask[1, tokens - 5 :] = 0
    x[1, tokens - 5 :] = 1e3 * torch.randn(5, dim)  # padding: left out
    got = effective_rank(x, mask)
    for b in range(2):
        s = torch.linalg.svdvals(x[b][mask[b].bool()].double())
        p = s / s.sum()
        expected = float(torch.exp(-(torch.special.xlogy(p, p)).sum()))  # 1 up to x's own float32 rounding
        assert expected == pytest.approx(1.0, abs=1e-5)
        assert got[b].item() == pytest.approx(expected, rel=2e-6)


# --- attention metrics ------------------------------------------------------------------------------------------


def _attention_inputs(causal: bool):
    torch.manual_seed(1)
    b, h, n, d = 2, 3, 6, 4
    q, k, v = (torch.randn(b, h, n, d) for _ in range(3))
    keep = torch.ones(b, 1, n, n, dtype=torch.bool)
    keep[1, :, :, 4:] = False  # sample 1: tokens 4, 5 are padding
    if causal:
        keep = keep & torch.ones(n, n, dtype=torch.bool).tril()
    token_mask = torch.ones(b, n)
    token_mask[1, 4:] = 0
    return q, k, v, keep, token_mask


@pytest.mark.parametrize("causal", [False, True])
def test_functional_j_and_gradient_alignment_equal_their_sums(causal):
    q, k, v, keep, token_mask = _attention_inputs(causal)
    scaling = q.shape[-1] ** -0.5
    probs = attention_probabilities(attention_scores(q, k, keep, scaling, is_causal=False))
    j = functional_j(probs, v, token_mask)
    alignment = gradient_alignment(q, k, v, keep, scaling, False, token_mask)
    for b in range(2):
        n = int(token_mask[b].sum())
        j_direct, cosines = 0.0, []
        for head in range(q.shape[1]):
            qh, kh, vh = q[b, head].double(), k[b, head].double(), v[b, head].double()
            for i in range(n):
                keys = [j_ for j_ in range(n) if keep[b, 0, i, j_]]
                # J: ½ (1/N) Σ_i Σ_j A_ij ‖v_i − v_j‖², A the softmax kernel over the allowed keys
                weights = torch.softmax(torch.stack([qh[i] @ kh[j_] * scaling for j_ in keys]), 0)
                j_direct += 0.5 / n * sum(w * (vh[i] - vh[j_]).square().sum() for w, j_ in zip(weights, keys))
                # ∇J estimates with the unnormalised kernels of App. E.1
                g_sym = sum((vh[i] - vh[j_]) * torch.exp(kh[i] @ kh[j_] * scaling) for j_ in keys)
                g_asym = sum((vh[i] - vh[j_]) * torch.exp(qh[i] @ kh[j_] * scaling) for j_ in keys)
                if g_sym.norm() > 0 and g_asym.norm() > 0:
                    cosines.append(torch.dot(g_sym, g_asym) / (g_sym.norm() * g_asym.norm()))
        assert j[b].item() == pytest.approx(float(j_direct), rel=1e-4)
        assert alignment[b].item() == pytest.approx(float(sum(cosines) / len(cosines)), rel=1e-4)
        if causal:  # the first token attends only to itself: both estimates are zero and it is left out
            assert len(cosines) == q.shape[1] * (n - 1)


def _gradient_alignment_by_definition(q, k, v, allowed, scaling):
    """App. E.1's estimates with the unnormalised kernels exp(score) in float64, per sample: the mean cosine over heads
    and the queries whose estimates are both nonzero, and how many those are."""
    means, counts = [], []
    for b in range(q.shape[0]):
        cosines = []
        for head in range(q.shape[1]):
            qh, kh, vh = q[b, head].double(), k[b, head].double(), v[b, head].double()
            for i in range(q.shape[2]):
                keys = [j for j in range(q.shape[2]) if allowed[b, i, j]]
                if not keys:  # a padded query
                    continue
                g_sym = sum((vh[i] - vh[j]) * torch.exp(kh[i] @ kh[j] * scaling) for j in keys)
                g_asym = sum((vh[i] - vh[j]) * torch.exp(qh[i] @ kh[j] * scaling) for j in keys)
                if g_sym.norm() > 0 and g_asym.norm() > 0:
                    g_sym, g_asym = g_sym / g_sym.abs().max(), g_asym / g_asym.abs().max()  # ‖g‖² may overflow
                    cosines.append(float(g_sym @ g_asym / (g_sym.norm() * g_asym.norm())))
        means.append(sum(cosines) / len(cosines))
        counts.append(len(cosines))
    return means, counts


@pytest.mark.parametrize("mask", ["boolean", "additive-causal"])
def test_gradient_alignment_of_tokens_that_attend_mostly_to_themselves(mask):
    """Keys of norm 40 with head_dim 8: each token's self-score k_i·k_i·s (about 570) exceeds its other scores by 100
    to 1000, so a softmax over every key underflows to 0 off the diagonal in float32 and the direction is lost (the
    sample read NaN, or the query was dropped). The reference is the definition with exp(score) in float64 (finite
    below 709); the eager attention's additive mask (the dtype's minimum, not −inf) must leave a causal
    model's first token out, as a boolean mask does."""
    torch.manual_seed(3)
    b, h, n, d = 2, 2, 6, 8
    scaling = d**-0.5
    k = torch.nn.functional.normalize(torch.randn(b, h, n, d), dim=-1) * 40
    q, v = k + torch.randn(b, h, n, d), torch.randn(b, h, n, d)  # queries near their own key, as in trained models
    token_mask = torch.ones(b, n)
    token_mask[1, 4:] = 0  # sample 1: tokens 4, 5 are padding
    allowed = token_mask[:, None, :].bool().expand(b, n, n)
    if mask == "boolean":
        attention_mask = allowed[:, None]
    else:
        allowed = allowed & torch.ones(n, n, dtype=torch.bool).tril()
        attention_mask = torch.zeros(b, 1, n, n).masked_fill(~allowed[:, None], torch.finfo(torch.float32).min)
    expected, counts = _gradient_alignment_by_definition(q, k, v, allowed & token_mask[:, :, None].bool(), scaling)
    assert counts == ([h * 6, h * 4] if mask == "boolean" else [h * 5, h * 3])  # every real query, bar first tokens
    got = gradient_alignment(q, k, v, attention_mask, scaling, False, token_mask)
    assert got.tolist() == pytest.approx(expected, rel=1e-4)


def test_symmetric_attention_has_perfect_gradient_alignment():
    q, k, v, keep, token_mask = _attention_inputs(causal=False)
    values = gradient_alignment(k, k, v, keep, 0.5, False, token_mask)  # W_Q = W_K: the two estimates coincide
    assert torch.allclose(values, torch.ones(2), atol=ATOL)


def test_attention_map_similarity_equals_flattened_cosine_over_real_queries():
    _, _, _, keep, token_mask = _attention_inputs(causal=False)
    a = torch.softmax(torch.randn(2, 3, 6, 6).masked_fill(~keep, float("-inf")), -1)
    b = torch.softmax(torch.randn(2, 3, 6, 6).masked_fill(~keep, float("-inf")), -1)
    got = attention_map_similarity(a, b, token_mask)
    for s in range(2):
        n = int(token_mask[s].sum())
        va, vb = a[s, :, :n].flatten().double(), b[s, :, :n].flatten().double()
        assert got[s].item() == pytest.approx(float(va @ vb / (va.norm() * vb.norm())), rel=1e-5)
    assert torch.allclose(attention_map_similarity(a, a, token_mask), torch.ones(2), atol=ATOL)


def test_grouped_query_heads_are_repeated():
    torch.manual_seed(2)
    q, v = torch.randn(1, 4, 5, 3), torch.randn(1, 2, 5, 3)
    k = torch.randn(1, 2, 5, 3)
    probs = attention_probabilities(attention_scores(q, k, None, 0.5, is_causal=True))
    expanded = attention_probabilities(attention_scores(q, k.repeat_interleave(2, 1), None, 0.5, is_causal=True))
    assert torch.equal(probs, expanded)
    assert torch.allclose(probs.sum(-1), torch.ones(1, 4, 5))
    assert torch.equal(probs.triu(1), torch.zeros_like(probs))  # causal: nothing above the diagonal
    assert functional_j(probs, v).shape == (1,)


def test_unknown_metric_lists_the_allowed_ones():
    with pytest.raises(ValueError, match="cosine_similarity"):
        check_metrics(["cosine", "effective_rank"])
    assert check_metrics(["effective_rank", "cosine_similarity"]) == ("cosine_similarity", "effective_rank")
