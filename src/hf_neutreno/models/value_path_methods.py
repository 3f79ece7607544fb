"""The rules of the value-path methods, each around its layer's attention call: what `value_path.py`'s attention
function hands a layer's backend, and what it makes of the backend's output.

A flat sibling of `value_path.py`, which dispatches to these functions by ``config.value_path["method"]``, so it travels
with every checkpoint saved with a value path. It imports only torch and `neutreno_term.py` (NeuTRENO's own rule, which
the package's models share). Each function takes `run`, the backend's call (optionally with other values, module or
keys), and the forward pass's context (`value_path._ForwardContext`: the KV cache's past length, what is kept beside
the cache, the gates); a new method is one more function here and one more branch there.
"""

import torch

from .neutreno_term import grouped_heads, may_recompute_saved, rebuild_saved, run_function


def first_row_token(past: int, length: int, rows: int) -> int:
    """The token (its position in the sequence) of the first of the `rows` rows of a layer's keys and values that the
    KV cache hands over to a call with `length` new tokens after `past` cached ones. The rows are consecutive tokens,
    this call's the last of them (every cache layer of transformers 5 appends the new rows to what it keeps), then,
    in a static cache's buffer, empty rows: so row r is token ``first_row_token + r``. A full cache hands over every
    token (0); a sliding window's, fewer than `past` before this call's."""
    return max(0, past + length - rows)


def query_rows(values: torch.Tensor, past: int, length: int) -> torch.Tensor:
    """The rows of this call's `length` queries in a KV cache's `values` (batch, kv heads, rows, d)."""
    rows = values.shape[2]
    if length > rows:
        raise RuntimeError(f"{length} queries after {past} cached tokens, but only {rows} values.")
    if length == rows:  # every row (no cache, or one that was empty): no view, nor its backward
        return values
    return values.narrow(2, past - first_row_token(past, length, rows), length)


def exclusive(run, context, value, strength):
    """Exclusive self-attention: the backend's output (batch, queries, heads, d) without ``strength`` times its
    component along each query token's own value, ``y − s (y·v̂) v̂``, per head; under grouped-query attention each
    query head takes its key/value head's value. `value` (batch, kv heads, tokens, d) holds the cached tokens first
    (`context.past` of them), so cached steps need nothing kept: a query's own value is the row of its position, or,
    where a sliding-window layer's cache hands over only its window, one of the last rows (`query_rows`)."""
    output, *rest = run()
    own = query_rows(value, context.past, output.shape[1])
    own = own.transpose(1, 2).unsqueeze(3)  # (batch, queries, kv heads, 1, d)
    # token-major, as the output projection reads it (an elementwise result takes its input's layout): else a backend
    # that returns a transposed view (GPT-2's eager attention) has the result kept here and a copy of it kept there
    grouped = grouped_heads(output.contiguous(), own.shape[2])  # (batch, queries, kv heads, group, d)
    result, removed, *_ = run_function(Exclusive, ExclusiveForTransforms, grouped, own, strength)
    if context.recompute_saved and may_recompute_saved():  # the backend's saved output, from the result
        scale = 1.0 if isinstance(strength, torch.Tensor) else strength
        rebuild_saved(output, output, _with_own_component, result, removed, own, scale)
    return result.flatten(2, 3), *rest


def _with_own_component(result, removed, own, scale):
    """The backend's output y from XSA's z = y − scale · removed · v, as (batch, queries, heads, d): one kernel. Equal
    up to rounding, which is all its use needs (the backend's backward pass reads it in softmax's Σ dO·O)."""
    return torch.addcmul(result, removed, own, value=scale).flatten(2, 3)


class Exclusive(torch.autograd.Function):
    """``z = y − s (y·v)/(v·v) v`` per query head, y grouped (batch, queries, kv heads, group, d) and v (batch, queries,
    kv heads, 1, d), with its backward written out: the gradient for y is the same projection of the incoming one,
    and those for v and s follow from it, in fewer kernels than autograd's graph of the formula. It keeps z, not y:
    the output projection keeps z as its input anyway, and the backend's own copy of y is rebuilt from z in the
    backward pass (`exclusive`). v is the backend's input, and the rest (…, 1) tensors, so training memory is
    native's. Its other outputs are what was removed per unit of v, (y·v)/(v·v) times s (only when s is learnable,
    and not differentiable: else it is the next), then (y·v)/(v·v) and v·v, which its backward pass reads: outputs,
    so that a gradient differentiated again (`create_graph=True`: gradient penalties, Hessian-vector products) follows
    them back to y and v. Called through `run_function`, which takes `ExclusiveForTransforms` under torch.func."""

    @staticmethod
    def forward(ctx, grouped, own, strength):
        outputs = Exclusive.compute(grouped, own, strength)
        Exclusive.keep(ctx, (grouped, own, strength), outputs)
        return outputs

    @staticmethod
    def compute(grouped, own, strength):
        # `strength`: a number (fixed) or a learnable scalar tensor
        squared = own.square().sum(-1, keepdim=True).clamp_min_(torch.finfo(own.dtype).tiny)  # v·v; v = 0: no change
        along = (grouped * own).sum(-1, keepdim=True).div_(squared)  # (y·v)/(v·v)
        if isinstance(strength, torch.Tensor):
            removed = along * strength
            return torch.addcmul(grouped, removed, own, value=-1), removed, along, squared
        return torch.addcmul(grouped, along, own, value=-strength), along, squared

    @staticmethod
    def keep(ctx, inputs, outputs):
        _, own, strength = inputs
        exclusive, *_, along, squared = outputs
        learnable = isinstance(strength, torch.Tensor)
        ctx.strength = None if learnable else strength
        ctx.save_for_backward(exclusive, own, along, squared, *([strength] if learnable else []))
        if learnable:
            ctx.mark_non_differentiable(outputs[1])
        # the other outputs' gradients stay None (no kernels for zeros) unless a gradient is differentiated again
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, grad, *others):
        exclusive, own, along, squared, *learned = ctx.saved_tensors
        strength = learned[0] if learned else ctx.strength
        grad_grouped = grad_own = grad_strength = None
        if grad is not None:
            across = (grad * own).sum(-1, keepdim=True).div_(squared)  # (g·v)/(v·v)
            if ctx.needs_input_grad[0]:  # the same projection of the incoming gradient
                if learned:
                    grad_grouped = torch.addcmul(grad, across * strength, own, value=-1)
                else:
                    grad_grouped = torch.addcmul(grad, across, own, value=-strength)
            both = along * across
            if learned and ctx.needs_input_grad[2]:
                grad_strength = -(both * squared).sum().to(strength.dtype)
            if ctx.needs_input_grad[1]:
                # −s ((g·v) y + (y·v) g − 2 (y·v)(g·v) v/(v·v))/(v·v), over the group, with y = z + s (y·v)/(v·v) v:
                # −s ((g·v) z + (y·v) g + (s − 2) (y·v)(g·v) v/(v·v))/(v·v)
                # in place on the one new tensor (no second full-size temporary), except under torch.func's
                # transforms: vmap has no batching rule for addcmul_ and would loop over the batch
                add = torch.addcmul if torch._C._are_functorch_transforms_active() else torch.Tensor.addcmul_
                mixed = add(across * exclusive, along, grad)
                if exclusive.shape[3] > 1:  # one query head per key/value head has nothing to sum (nor a kernel)
                    mixed, both = mixed.sum(3, keepdim=True), both.sum(3, keepdim=True)
                if learned:
                    grad_own = add(mixed, both * (strength - 2), own).mul_(-strength)
                else:
                    grad_own = add(mixed, both, own, value=strength - 2).mul_(-strength)
        grad_along, grad_squared = others[-2:]
        if grad_along is not None or grad_squared is not None:  # a gradient differentiated again
            extra_grouped, extra_own = _ratio_gradients(
                exclusive, own, along, squared, strength, grad_along, grad_squared
            )
            if ctx.needs_input_grad[0] and extra_grouped is not None:
                grad_grouped = extra_grouped if grad_grouped is None else grad_grouped + extra_grouped
            if ctx.needs_input_grad[1]:
                grad_own = extra_own if grad_own is None else grad_own + extra_own
        return grad_grouped, grad_own, grad_strength


class ExclusiveForTransforms(Exclusive):
    """`Exclusive` in torch.func's form (`run_function`)."""

    generate_vmap_rule = True
    forward = staticmethod(Exclusive.compute)
    setup_context = staticmethod(Exclusive.keep)


def _ratio_gradients(exclusive, own, along, squared, strength, grad_along, grad_squared):
    """The gradients for y and v of XSA's outputs a = (y·v)/(v·v) and q = v·v (`Exclusive`), which only a gradient
    differentiated again reaches: ∂a/∂y = v/q, ∂a/∂v = (y − 2 a v)/q, ∂q/∂v = 2 v, y = z + s a v. Where v = 0 (q is
    clamped), a is 0 and takes no gradient."""
    extra_grouped, extra_own = None, 0
    if grad_along is not None:
        scale = grad_along / squared * (squared > torch.finfo(squared.dtype).tiny)
        extra_grouped = scale * own
        grouped = torch.addcmul(exclusive, along * strength, own)
        extra_own = (scale * (grouped - 2 * along * own)).sum(3, keepdim=True)
    if grad_squared is not None:
        extra_own = extra_own + 2 * grad_squared * own
    return extra_grouped, extra_own


def _pending(kept: dict, layer: int, dim: int, mixed: int, low: int, end: int, what: str) -> torch.Tensor:
    """What is kept beside the cache (`kept`, per layer, along `dim` from token `mixed`) for the tokens from `low` to
    `end` whose rows are not mixed into the cache yet; `RuntimeError` where the cache does not carry it."""
    rows = kept.get(layer)
    if rows is None or rows.shape[dim] < end - mixed:
        raise RuntimeError(
            f"Layer {layer}: the value path needs {what} of cached tokens {low} to {end - 1}, whose rows it has not "
            "mixed into the cache yet, which this cache does not carry (a cache made by another model, or one that "
            "does not return what it stores, such as a quantised one). Generate with a DynamicCache or StaticCache."
        )
    return rows.narrow(dim, low - mixed, end - low)


def value_embedding(run, context, table, layer, value, strength, in_cache=False):
    """Attention over ``V + g E[token]``: `value` (batch, kv heads, tokens, d), E the layer's `table` (kv heads · d
    wide; the module looked up at each call, which PEFT may have wrapped), g `strength` (a number or a learnable
    scalar) or, gated, ``2 g₀ σ(W x[..., :12])`` per token and key/value head. Token-wise, as the value residual's mix:
    a KV cache may hold the rows with their embedding added already (those of the first `context.mixed_rows[layer]`
    tokens; row r of `value` is token ``first_row_token + r``). Where
    `value` is the cache's own tensor and there are no gradients (`in_cache`), the rows not added yet are added there,
    in place, so that generation costs O(d) per new token and layer;
    the token ids (and gate values) of rows not added yet are kept beside the cache, and their rows rebuilt from the
    table when a later call needs them."""
    start, end, rows = context.past, context.past + context.token_ids.shape[-1], value.shape[-2]
    mixed = min(context.mixed_rows.get(layer, 0), start)  # a cropped cache keeps fewer rows
    offset = first_row_token(start, end - start, rows)
    low = max(mixed, offset)  # the first token whose row gets its embedding here (a window drops earlier ones)
    token_ids, gate = context.token_ids, context.gates.get(layer)  # gate: σ(W x[..., :12]), (batch, tokens, kv)
    if low < start:  # earlier rows not in the cache's tensor yet: their ids (and gate values), kept beside it
        pending = _pending(context.token_rows, layer, -1, mixed, low, start, "the token ids")
        token_ids = torch.cat([pending, token_ids], dim=-1)
        if gate is not None:
            pending = _pending(context.gate_rows, layer, 1, mixed, low, start, "the gate's values")
            gate = torch.cat([pending.to(gate.dtype), gate], dim=1)
    if low > mixed:  # nothing is left of the tokens before `low`: none to add later
        mixed = context.mixed_rows[layer] = low
    batch, kv_heads, _, head_dim = value.shape
    embedded = table(token_ids)
    if embedded.shape[-1] != kv_heads * head_dim:
        raise ValueError(
            f"Layer {layer}'s value-embedding table is {embedded.shape[-1]} wide, but its values have {kv_heads} "
            f"key/value heads of {head_dim} ({kv_heads * head_dim})."
        )
    # in the values' dtype (a float32 table under bf16 autocast): no kernel where they agree
    embedded = embedded.view(batch, -1, kv_heads, head_dim).to(value.dtype)
    if gate is not None:  # g = 2 g₀ σ(W x[..., :12])
        embedded, strength = embedded * gate.unsqueeze(-1).to(value.dtype), 2 * strength
    embedded = embedded.transpose(1, 2)  # (batch, kv heads, rows, d)
    if isinstance(strength, torch.Tensor):
        embedded, strength = embedded * strength, 1.0
    if in_cache:
        value.narrow(-2, mixed - offset, end - mixed).add_(embedded, alpha=strength)
        context.mixed_rows[layer] = end
        context.token_rows.pop(layer, None)
        context.gate_rows.pop(layer, None)
        return run()
    context.token_rows[layer] = token_ids  # rows mixed..end, for a later call that adds them in the cache
    if gate is not None:
        context.gate_rows[layer] = gate.detach()
    if mixed > offset or end - offset != rows:
        # Rows before `mixed` hold their embedding already; rows after `end` (a static cache's free slots) are zeros.
        here, rest = mixed - offset, rows - (end - offset)
        added = torch.add(value.narrow(-2, here, end - mixed), embedded, alpha=strength)
        return run(torch.cat([value.narrow(-2, 0, here), added, value.narrow(-2, end - offset, rest)], dim=-2))
    return run(torch.add(value, embedded, alpha=strength))


def value_residual(run, context, layer, query, value, first, coefficient, in_cache=False):
    """Attention over ``(1 − α) V_ℓ + α V_0`` (exactly V_ℓ at α = 0). `coefficient`: α as a number, a learnable scalar,
    or (a gate) one per token and key/value head of this call's tokens, (batch, kv heads, queries, 1). `first`: V_0
    as layer 0's KV cache hands it over, whose rows may be other tokens than `value`'s (`first_row_token`: a sliding
    window's cache keeps fewer).

    The mix is token-wise, so a KV cache may hold mixed values. `context.mixed_rows[layer]` counts the leading tokens
    whose rows in the cache's tensor do: where `value` is that tensor and there are no gradients (`in_cache`), the rows
    not mixed yet (this call's, and those of a call that ran with gradients or before the model made its cache) are
    mixed there, in place, so that generation costs O(d) per new token and layer instead of a pass over the whole
    cache. Otherwise nothing is written into the cache."""
    start, end, rows = context.past, context.past + query.shape[-2], value.shape[-2]
    mixed = min(context.mixed_rows.get(layer, 0), start)  # a cropped cache keeps fewer rows
    offset = first_row_token(start, end - start, rows)
    low = max(mixed, offset)  # the first token whose row is mixed here (a window drops the earlier ones)
    alpha = coefficient
    per_row = isinstance(coefficient, torch.Tensor) and coefficient.dim() > 0
    if per_row and low < start:  # a gate's α of the earlier rows that are not mixed yet, kept beside the cache
        pending = _pending(context.gate_rows, layer, -2, mixed, low, start, "the gate's α")
        alpha = torch.cat([pending.to(coefficient.dtype), coefficient], dim=-2)
    first_offset = first_row_token(start, end - start, first.shape[-2])
    if first_offset > low:  # V_0 of tokens that layer 0's sliding window has dropped: kept beside the cache
        pending = _pending(context.first_rows, layer, -2, mixed, low, first_offset, "V_0 (gone from layer 0's window)")
        source = torch.cat([pending, first.narrow(-2, 0, end - first_offset)], dim=-2)
    elif low > first_offset or end - low != first.shape[-2]:
        source = first.narrow(-2, low - first_offset, end - low)
    else:  # every row of V_0 (a forward without a cache): no view
        source = first
    aliased = first_offset <= low  # `source` is a view of layer 0's rows
    if low > mixed:  # nothing is left of the tokens before `low`: none to mix later
        mixed = context.mixed_rows[layer] = low
    if in_cache:
        value.narrow(-2, low - offset, end - low).lerp_(source, alpha)
        context.mixed_rows[layer] = end
        context.gate_rows.pop(layer, None)
        context.first_rows.pop(layer, None)
        return run()
    if per_row:
        context.gate_rows[layer] = alpha.detach()  # rows mixed..end, for a later call that mixes them in the cache
    # their V_0, which layer 0's sliding window may drop before that call: a copy where it is a view of a static
    # cache's buffer, which the next tokens overwrite in place
    context.first_rows[layer] = source.clone() if aliased and _overwrites_in_place(context.cache) else source
    aligned = first_offset == offset and first.shape[-2] == rows  # V_0 row for row (no window between them)
    if mixed > offset or not aligned or (per_row and end - offset != rows):
        # Rows before `mixed` hold the mix already; rows after `end` (a static cache's free slots) are zeros.
        here, count = low - offset, end - low
        mix = torch.lerp(value.narrow(-2, here, count), source, alpha)
        return run(torch.cat([value.narrow(-2, 0, here), mix, value.narrow(-2, here + count, rows - here - count)], -2))
    if not isinstance(alpha, torch.Tensor):
        return run(torch.lerp(value, first, alpha))
    # A learnable α keeps V_ℓ and V_0 for its gradient, beside the backend's copy of the mix: that copy is rebuilt
    # from them in the backward pass instead.
    return attend_over_mix(run, context, torch.lerp(value, first, alpha), value, first, alpha)


def _overwrites_in_place(cache) -> bool:
    """Whether a KV cache writes new rows into the tensors it handed over before (a static cache's buffers)."""
    return any(getattr(layer, "is_compileable", False) for layer in getattr(cache, "layers", None) or ())


def attend_over_mix(run, context, mixed, value, first, coefficient):
    """``run(mixed)``, the backend's saved copy of the mix rebuilt from V_ℓ, V_0 and α in the backward pass (where
    the context allows it) instead of kept."""
    result = run(mixed)
    if context.recompute_saved and may_recompute_saved():
        rebuild_saved(result[0], mixed, torch.lerp, value, first, coefficient)
    return result


class OneGroup:
    """An attention module seen with one query head per key/value head: the second attention call of twicing hands
    over keys and values already repeated per query head, which the backend must not repeat again."""

    num_key_value_groups = 1

    def __init__(self, module):
        self.__dict__["_module"] = module

    @property
    def viewed(self):
        """The module this view is of."""
        return self.__dict__["_module"]

    def __getattr__(self, name):
        return getattr(self.__dict__["_module"], name)


def twicing(run, context, module, layer, query, key, value, dropout=0.0):
    """Twicing attention (Abdullaev & Nguyen, ICLR 2025): ``A V + c A (V − A V)`` with the layer's own attention
    matrix A, computed as a second call of the backend on the same queries and keys, whose values are the residual
    ``V − A V`` per query head. In generation, A V of the earlier tokens is kept per layer beside the KV cache (the
    residual needs it at every key, `_history`), and this call's rows are added to it.

    Under attention dropout (`dropout`, the probability the layer hands its backend) A is the dropped matrix, the same
    in both products, as in the authors' code: the random state is restored after the first call, so that the second
    draws the same mask, and both calls hand over keys and values per query head, so that the backend takes the same
    path (and the same random numbers) for both."""
    heads, kv_heads = query.shape[1], key.shape[1]
    group = heads // kv_heads
    values = value.repeat_interleave(group, dim=1) if group > 1 else value
    keys_per_head = key.repeat_interleave(group, dim=1) if group > 1 else key
    if dropout:
        device = query.device
        with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device], device_type=device.type):
            output, *rest = run(values, OneGroup(module), keys_per_head)
    else:
        output, *rest = run()  # (batch, q, heads, d)
    attended = output.transpose(1, 2)  # A V at this call's tokens: (batch, heads, q, d)
    if context.past or attended.shape[-2] != value.shape[-2]:
        attended = _history(context, module, layer, attended, value.shape[-2])
    else:  # every row is this call's: kept as it is, for a cache that the model makes in this call
        context.twicing_history[layer], context.twicing_offset[layer] = attended, 0
    second, *_ = run(values - attended, OneGroup(module), keys_per_head)
    return (torch.add(output, second, alpha=context.coefficient), *rest)


def _history(context, module, layer, attended, rows):
    """A V at each of the `rows` rows of the layer's values that a KV cache handed over (row r is token
    ``first_row_token + r``), this call's `attended` at its own tokens. A V is kept per layer in token order from
    token `context.twicing_offset[layer]`, as far back as the cache's layer keeps its own rows."""
    start, length = context.past, attended.shape[-2]
    first = first_row_token(start, length, rows)
    history, offset = context.twicing_history.get(layer), context.twicing_offset.get(layer, start)
    if history is None:
        history = attended.new_zeros(*attended.shape[:2], 0, attended.shape[-1])
    if offset > first or offset + history.shape[-2] < start:
        raise RuntimeError(
            f"Layer {layer}: twicing needs A V of the {start - first} cached tokens its cache hands over, which this "
            "cache does not carry (a cache built from another cache's tensors, a prefix, or one made by another "
            "model). Continue with the cache this model filled (copy it with copy.deepcopy)."
        )
    end = first + rows - offset  # history's rows up to the last one handed over
    if history.shape[-2] < end:  # a dynamic cache grows; a static one holds its buffer
        grown = attended.new_zeros(*attended.shape[:2], end, attended.shape[-1])
        grown[..., : history.shape[-2], :] = history
        history = grown
    elif history.shape[-2] > end:  # a cropped cache (assisted generation): the rows after it are stale
        history = history[..., :end, :]
    history[..., start - offset : start - offset + length, :] = attended
    handed = history.narrow(-2, first - offset, rows)
    stored = stored_values(context, module)  # the cache keeps its last tokens for later calls: that many rows
    if stored is not None and start + length - stored.shape[-2] > offset:
        kept_from = start + length - stored.shape[-2]
        history, offset = history[..., kept_from - offset :, :], kept_from
    context.twicing_history[layer], context.twicing_offset[layer] = history, offset
    return handed


def stored_values(context, module) -> torch.Tensor | None:
    """The values that the KV cache which came with the call keeps for `module`'s layer after this call's update (a
    sliding window's: its last rows), or None without such a cache."""
    layers, index = getattr(context.cache, "layers", None), getattr(module, "layer_idx", None)
    if not layers or not isinstance(index, int) or not 0 <= index < len(layers):
        return None
    stored = getattr(layers[index], "values", None)
    return stored if isinstance(stored, torch.Tensor) else None
