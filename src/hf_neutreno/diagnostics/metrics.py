"""The over-smoothing metrics on one batch: plain tensor functions returning one value per sample.

Conventions shared by every function:

- `hidden` is one hidden state, (batch, tokens, dim); `token_mask` is (batch, tokens), 1 for real tokens and 0 for
  padding (None: every token is real). Padding tokens are left out of every sum and every count.
- Attention tensors are per head, (batch, heads, tokens, head_dim) as the attention interface receives them.
- Everything is computed in float32 (float64 where noted), whatever the model's dtype.
- A value that is undefined for a sample (fewer than two tokens, a zero matrix, ...) is NaN; the caller leaves it out
  of the average and counts the samples that entered it.
- Hidden-state metrics treat every real token alike, prefix tokens (CLS, distillation) included, and use the same
  formulas for causal models (all pairs of real tokens), as the papers do for encoders.
- Attention metrics are per head on the tensors the layer's attention function receives (after RoPE, before the
  output projection; for NeuTRENO, before the ``λ (V_0 − V)`` term is added), with the mask that function receives:
  masked keys (padding, later tokens of a causal model) get probability 0, and padded query rows are left out.
"""

import torch


def _mask(hidden: torch.Tensor, token_mask: torch.Tensor | None) -> torch.Tensor:
    if token_mask is None:
        return hidden.new_ones(hidden.shape[:2], dtype=torch.float32)
    return token_mask.to(device=hidden.device, dtype=torch.float32)


def _nan_where(condition: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    return torch.where(condition, values, torch.full_like(values, float("nan")))


def token_cosine_similarity(hidden: torch.Tensor, token_mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""Mean pairwise cosine similarity of the tokens, NeuTRENO App. E.3: ``1/(N(N−1)) Σ_{i≠j} x̂_iᵀ x̂_j``.

    With unit vectors x̂_i = x_i/‖x_i‖ and s = Σ_i x̂_i, the sum over pairs i ≠ j is ‖s‖² − Σ_i ‖x̂_i‖², so the cost is
    O(N d) instead of an N×N matrix. N counts real tokens only; a zero vector counts as orthogonal to every token.
    NaN for a sample with fewer than two tokens.
    """
    x, m = hidden.float(), _mask(hidden, token_mask)
    unit = x / x.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny) * m.unsqueeze(-1)
    total = unit.sum(dim=1)
    pair_sum = total.square().sum(-1) - unit.square().sum(dim=(1, 2))
    n = m.sum(dim=1)
    return _nan_where(n >= 2, pair_sum / (n * (n - 1)).clamp_min(1))


def frequency_components(hidden: torch.Tensor, token_mask: torch.Tensor | None = None):
    r"""Frobenius norms of HFC[X] = X − 1x̄ᵀ, LFC[X] = 1x̄ᵀ and X itself (x̄ is the mean of the real tokens).

    Dovonon et al.: LFC[X] = (1/n) 1 1ᵀ X, HFC[X] = (I − (1/n) 1 1ᵀ) X. ‖LFC‖_F = √n ‖x̄‖.
    """
    x, m = hidden.float(), _mask(hidden, token_mask)
    n = m.sum(dim=1)
    mean = (x * m.unsqueeze(-1)).sum(dim=1) / n.clamp_min(1).unsqueeze(-1)
    hfc = ((x - mean.unsqueeze(1)) * m.unsqueeze(-1)).norm(dim=(1, 2))
    lfc = mean.norm(dim=-1) * n.sqrt()
    total = (x * m.unsqueeze(-1)).norm(dim=(1, 2))
    return hfc, lfc, total


def hfc_lfc_ratio(hidden: torch.Tensor, token_mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""‖HFC[X]‖_F / ‖LFC[X]‖_F (Dovonon et al.): tends to 0 as the model over-smooths.

    The poster writes ‖·‖_2; the Frobenius norm is used here (O(N d); for the rank-one LFC both are equal).
    NaN where the mean token is 0.
    """
    hfc, lfc, _ = frequency_components(hidden, token_mask)
    return _nan_where(lfc > 0, hfc / lfc.clamp_min(torch.finfo(torch.float32).tiny))


def rank_one_distance(hidden: torch.Tensor, token_mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""Relative distance to the nearest matrix of identical tokens, ‖X − 1x̄ᵀ‖_F / ‖X‖_F, in [0, 1].

    1x̄ᵀ is the closest matrix of the form 1cᵀ in Frobenius norm (Dong et al. 2021's res(X)). 0 means every token
    is the same vector. NaN for a zero matrix.
    """
    hfc, _, total = frequency_components(hidden, token_mask)
    return _nan_where(total > 0, hfc / total.clamp_min(torch.finfo(torch.float32).tiny))


def effective_rank(hidden: torch.Tensor, token_mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""Effective rank (Roy & Vetterli 2007): exp(H(p)), p_k = σ_k / Σσ over the singular values of X (real tokens).

    H is the Shannon entropy (natural log), so the value lies in [1, min(N, d)]: 1 for identical tokens.
    The singular values are the square roots of the eigenvalues of the smaller Gram matrix (d × d or N × N).
    Over-smoothed states are dominated by the mean token, which a float32 Gram matrix would blur into the small
    eigenvalues (an exact rank-one matrix would read 1.14, and float32 products of the centred tokens alone lift a
    rank-one centred part of DeiT-tiny's size to 1.03); the Gram matrix is therefore assembled in float64 from the
    centred tokens C = X − 1x̄ᵀ and the mean (XᵀX = CᵀC + n x̄x̄ᵀ, since Cᵀ1 = 0) and eigendecomposed in float64.
    Padding rows are zero and add no singular value.

    This is the costly metric, hence not in `DEFAULT_METRICS`: one float64 eigendecomposition per sample and hidden
    state (a 192 × 192 one takes about 1.4 ms on one CPU core: on CPU, about as long as DeiT-tiny's forward pass).
    """
    x = hidden.double()
    if token_mask is None:
        n = torch.full(x.shape[:1], x.shape[1], dtype=torch.float64, device=x.device)
        mean = x.mean(dim=1, keepdim=True)  # (batch, 1, dim)
        centred = x - mean
    else:
        m = token_mask.to(device=x.device, dtype=torch.float64).unsqueeze(-1)
        count = m.sum(dim=1, keepdim=True)  # (batch, 1, 1)
        mean = (x * m).sum(dim=1, keepdim=True) / count.clamp_min(1)
        centred = (x - mean).mul_(m)
        n = count.flatten()
    if x.shape[1] > x.shape[2]:  # d × d: XᵀX = CᵀC + n x̄x̄ᵀ
        gram = (centred.mT @ centred).baddbmm_(mean.mT * n[:, None, None], mean)
    else:  # N × N: XXᵀ = CCᵀ + u1ᵀ + 1uᵀ + ‖x̄‖² 11ᵀ with u = C x̄ and 1 the real tokens
        ones = torch.ones_like(x[..., :1]) if token_mask is None else m
        u = centred @ mean.mT
        gram = centred @ centred.mT + u @ ones.mT + ones @ u.mT
        gram = gram + mean.square().sum(dim=-1, keepdim=True) * (ones @ ones.mT)
    singular = torch.linalg.eigvalsh(gram).clamp_min_(0).sqrt_()
    total = singular.sum(dim=-1, keepdim=True)
    p = singular / total.clamp_min(torch.finfo(torch.float64).tiny)
    erank = torch.exp(-torch.special.xlogy(p, p).sum(dim=-1)).float()
    return _nan_where(total.squeeze(-1) > 0, erank)


def hidden_state_metrics(hidden: torch.Tensor, token_mask: torch.Tensor | None, names) -> dict[str, torch.Tensor]:
    """The requested hidden-state metrics of one hidden state, each (batch,), sharing intermediate results."""
    out = {}
    if "cosine_similarity" in names:
        out["cosine_similarity"] = token_cosine_similarity(hidden, token_mask)
    if "hfc_lfc_ratio" in names or "rank_one_distance" in names:
        hfc, lfc, total = frequency_components(hidden, token_mask)
        tiny = torch.finfo(torch.float32).tiny
        if "hfc_lfc_ratio" in names:
            out["hfc_lfc_ratio"] = _nan_where(lfc > 0, hfc / lfc.clamp_min(tiny))
        if "rank_one_distance" in names:
            out["rank_one_distance"] = _nan_where(total > 0, hfc / total.clamp_min(tiny))
    if "effective_rank" in names:
        out["effective_rank"] = effective_rank(hidden, token_mask)
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Attention metrics. `attention_mask` is what the attention function received: None (then `is_causal` decides), a
# boolean mask (True = attend) or an additive float mask, broadcastable to (batch, heads, queries, keys).


def _repeat_heads(states: torch.Tensor, heads: int) -> torch.Tensor:
    """Grouped-query attention: repeat key/value heads to the number of query heads."""
    if states.shape[1] == heads:
        return states
    return states.repeat_interleave(heads // states.shape[1], dim=1)


def attention_scores(
    query: torch.Tensor,
    key: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    is_causal: bool,
    *,
    softcap: float | None = None,
    position_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """The scores the softmax takes, q kᵀ · scaling + mask, in float32, (batch, heads, queries, keys). As the backends
    compute them, before the mask: `softcap` caps the scores at ± softcap through tanh (Gemma 2), and `position_bias`
    is added to them (T5's relative position bias). Masked keys get −inf (a boolean mask, or a causal model without
    one) or the additive mask's large negative value."""
    key = _repeat_heads(key, query.shape[1])
    scores = torch.matmul(query.float(), key.float().transpose(-1, -2)) * scaling
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if position_bias is not None:
        scores = scores + position_bias.to(device=scores.device, dtype=scores.dtype)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask.to(scores.device), float("-inf"))
        else:
            scores = scores + attention_mask.to(device=scores.device, dtype=scores.dtype)
    elif is_causal and query.shape[-2] > 1:
        q_len, k_len = query.shape[-2], key.shape[-2]
        allowed = torch.ones(q_len, k_len, dtype=torch.bool, device=scores.device).tril(k_len - q_len)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores


def attention_probabilities(scores: torch.Tensor, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """The softmax of `attention_scores` (soft-capping, position bias, mask) in float32, (batch, heads, queries,
    keys); fully masked rows are 0. `sinks` (logits broadcastable to (batch, heads, queries, 1)) join the softmax as
    one more key that takes probability and is then dropped (gpt-oss's attention sinks), so a row sums to
    less than 1."""
    if sinks is not None:
        sinks = sinks.to(device=scores.device, dtype=scores.dtype).expand(*scores.shape[:-1], 1)
        return torch.softmax(torch.cat([scores, sinks], dim=-1), dim=-1)[..., :-1].nan_to_num(0.0)
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)


def _without_self(probs: torch.Tensor) -> torch.Tensor:
    """Self-attention probabilities with the diagonal (j = i) set to 0."""
    eye = torch.eye(probs.shape[-2], probs.shape[-1], dtype=torch.bool, device=probs.device)
    return probs.masked_fill(eye, 0.0)


def _query_mask(query_mask: torch.Tensor | None, probs: torch.Tensor) -> torch.Tensor:
    if query_mask is None:
        return probs.new_ones(probs.shape[0], probs.shape[2])
    return query_mask.to(device=probs.device, dtype=torch.float32)


def functional_j(probs: torch.Tensor, value: torch.Tensor, query_mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""The nonlocal functional J(u) = ½ ∫∫ ‖u(x) − u(y)‖² k(x, y) dx dy of NeuTRENO §2 for one layer (Fig. 3).

    Discretised with u = the layer's values (u(·, 0) = v in the paper) and the kernel = the layer's attention
    probabilities A (row-normalised k, the Monte-Carlo weights of the paper's Eq. 12):

        J = ½ · (1/N) Σ_h Σ_i Σ_j A^h_ij ‖v^h_i − v^h_j‖²

    i.e. summed over heads (‖u_i − u_j‖² of the merged value vector splits into the heads, each with its own kernel)
    and averaged over the N real query tokens. Masked keys (padding, and later tokens in a causal model) have A = 0.
    Computed in O(N² d) as Σ_{j≠i} A_ij ‖v_i − v_j‖² = r_i‖v_i‖² − 2 v_iᵀ(A°v)_i + (A°‖v‖²)_i, with A° the
    probabilities without the diagonal (j = i adds nothing, and leaving it out avoids cancellation when a token
    attends mostly to itself) and r_i = Σ_{j≠i} A_ij, on values centred per head (J does not change under a shift,
    and centring avoids cancellation when the values are nearly equal).
    """
    value = _repeat_heads(value, probs.shape[1]).float()
    qm = _query_mask(query_mask, probs)
    n = qm.sum(dim=1)
    weights = qm[:, None, :, None]
    value = value - (value * weights).sum(dim=2, keepdim=True) / n.clamp_min(1)[:, None, None, None]
    others = _without_self(probs)
    squared = value.square().sum(dim=-1)
    per_query = (
        others.sum(dim=-1) * squared
        - 2 * (value * (others @ value)).sum(dim=-1)
        + (others @ squared.unsqueeze(-1)).squeeze(-1)
    )
    per_query = per_query.clamp_min(0).sum(dim=1)  # sum over heads
    return _nan_where(n >= 1, 0.5 * (per_query * qm).sum(dim=1) / n.clamp_min(1))


def _kernel_without_self(scores: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """softmax over j ≠ i of the scores (batch, heads, tokens, tokens): the diagonal is set to −inf before the
    softmax, so that each row's maximum, and hence its scale, is taken over the other keys. A row with no other key
    (a causal model's first token) is 0. An additive mask blocks a key with a large negative value rather than −inf:
    such keys (at most half the mask dtype's minimum) are set to −inf as well, or such a row would spread its weight
    evenly over the blocked keys."""
    blocked = torch.eye(scores.shape[-2], scores.shape[-1], dtype=torch.bool, device=scores.device)
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        floor = torch.finfo(attention_mask.dtype).min / 2
        blocked = blocked | (attention_mask.to(scores.device) <= floor)
    return torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1).nan_to_num(0.0)


def gradient_alignment(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    is_causal: bool,
    query_mask: torch.Tensor | None = None,
    *,
    scores: torch.Tensor | None = None,
    softcap: float | None = None,
    position_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Cosine between the symmetric and asymmetric estimates of ∇J(u) (NeuTRENO App. E.1, Table 4).

    Per head h and query i: g_sym = Σ_j (v_i − v_j) exp(k_iᵀk_j · s) and g_asym = Σ_j (v_i − v_j) exp(q_iᵀk_j · s),
    with s the model's own attention scaling (1/√d_head) and j over the keys that i may attend to (padding and, in a
    causal model, later tokens excluded). The j = i term is zero, and the cosine ignores a positive factor per
    estimate, so each is computed as v_i − Σ_{j≠i} Â_ij v_j with Â the kernel's softmax over j ≠ i: the diagonal is
    set to −inf in the scores before the softmax, so a token that attends mostly to itself (a self-score above the
    others' by more than about 90) keeps its other weights in float32 instead of losing them to underflow. The cosine is
    averaged over heads and real query tokens; positions where an estimate is zero (a causal model's first token,
    which has no other key) are left out. A model's logit soft-capping (`softcap`) shapes both kernels; a position
    bias (`position_bias`) enters the asymmetric kernel only; attention sinks would only scale them, which the
    normalisation removes. `scores`: the asymmetric kernel's `attention_scores` (soft-capping, position bias and
    mask included), where the caller has them already.
    """
    heads = query.shape[1]
    key, value = _repeat_heads(key, heads), _repeat_heads(value, heads).float()
    if scores is None:
        scores = attention_scores(
            query, key, attention_mask, scaling, is_causal, softcap=softcap, position_bias=position_bias
        )
    symmetric = attention_scores(key, key, attention_mask, scaling, is_causal, softcap=softcap)
    defined = _query_mask(query_mask, scores)[:, None, :] > 0
    estimates = []
    for kernel in (scores, symmetric):
        others = _kernel_without_self(kernel, attention_mask)
        defined = defined & (others.sum(dim=-1) > 0)
        estimates.append(value - others @ value)
    g_asym, g_sym = estimates
    n_asym, n_sym = g_asym.norm(dim=-1), g_sym.norm(dim=-1)
    defined = defined & (n_asym > 0) & (n_sym > 0)
    cosine = (g_asym * g_sym).sum(dim=-1) / (n_asym * n_sym).clamp_min(torch.finfo(torch.float32).tiny)
    count = defined.sum(dim=(1, 2))
    total = torch.where(defined, cosine, torch.zeros_like(cosine)).sum(dim=(1, 2))
    return _nan_where(count > 0, total / count.clamp_min(1))


def attention_map_similarity(
    previous: torch.Tensor, current: torch.Tensor, query_mask: torch.Tensor | None = None
) -> torch.Tensor:
    r"""Cosine similarity between the attention maps of two successive layers (NeuTRENO Fig. 5, head redundancy).

    Per sample, the maps of all heads are flattened into one vector (head h of one layer against head h of the
    next), over real query rows; padded keys carry zero probability. If the two layers have different numbers of
    heads, the head-averaged maps are compared.
    """
    if previous.shape[1] != current.shape[1]:
        previous, current = previous.mean(dim=1, keepdim=True), current.mean(dim=1, keepdim=True)
    qm = _query_mask(query_mask, current)[:, None, :, None]
    a, b = previous * qm, current * qm
    dot = (a * b).sum(dim=(1, 2, 3))
    norms = a.flatten(1).norm(dim=1) * b.flatten(1).norm(dim=1)
    return _nan_where(norms > 0, dot / norms.clamp_min(torch.finfo(torch.float32).tiny))
