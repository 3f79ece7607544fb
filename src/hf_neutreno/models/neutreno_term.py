"""NeuTRENO's term (Nguyen, Nguyen, Baraniuk, NeurIPS 2023, eq. 26), ``U = A V + λ (V_0 − V)``, added to an
attention backend's output, with its training memory kept at the plain model's.

The one implementation of the term: this package's models and `value_path.py` (any transformers model) import it as
their flat sibling, and it travels with the checkpoints of both. It imports only torch.

Memory: the output with the term is what the next operation (the output projection) keeps for its backward pass, and
the backend keeps its own output without the term (SDPA's backward reads it). Instead of both, the backend's copy is
rebuilt from the kept one in the backward pass, as ``output − λ (V_0 − V)`` (`rebuild_saved`): V and V_0 are kept
by the backends anyway. This leaves any output projection as it is (a LoRA or quantised one included). A learnable λ's
gradient reads V_0 − V, which its product keeps: rebuilt the same way, from V_0 and V.
"""

from collections.abc import Callable

import torch


def attention_with_neutreno_term(
    attention: Callable[[], tuple],
    first_values: torch.Tensor | None,
    values: torch.Tensor,
    coefficient: float | torch.Tensor,
    *,
    recompute_saved: bool = True,
) -> tuple:
    """``attention()`` (the backend's call, returning (output, *rest), output (batch, queries, heads, head_dim)) with
    ``λ (V_0 − V)`` added to its output, where λ is `coefficient` (a number, or a scalar tensor that is learned).

    `first_values` (V_0) and `values` (V) are (batch, key/value heads, tokens, head_dim); under grouped-query attention
    each query head gets its key/value head's term. Or both are merged, (batch, tokens, heads * head_dim), as a model
    without grouped-query attention projects them (no view operations to make heads: host time on small shapes).
    The term is token-wise: V_0 and V hold the queries' rows only (a KV cache's rows of them: `value_path_methods`).
    No V_0 (layer 0) or λ = 0: the backend's output as it is. `recompute_saved`: may the backend's
    copy of its output (and a learnable λ's V_0 − V) be rebuilt in the backward pass (not under activation
    checkpointing, whose own hooks must see every saved tensor); never without gradients or under torch.compile, which
    traces no saved-tensor hooks.
    """
    learnable = isinstance(coefficient, torch.Tensor)
    if first_values is None or (not learnable and coefficient == 0):
        return attention()
    output, *rest = attention()
    rows = values.shape[1 if values.dim() == 3 else -2]
    if rows != output.shape[1]:
        raise RuntimeError(f"NeuTRENO's term needs the values of the {output.shape[1]} queries alone, got {rows} rows.")
    rebuild = recompute_saved and may_recompute_saved()
    if learnable or rebuild:  # these read V_0 and V themselves, laid out as the output (the rebuilds in backward)
        grouped, first_values, values = _aligned(output, first_values, values)
        difference = first_values - values
        if learnable:
            # Plain autograd operations, whose backward pass calls no Python. λ's gradient reads V_0 − V, which the
            # product keeps: rebuilt from V_0 and V (which attention keeps anyway) in the backward pass instead.
            scaled = difference * coefficient
            combined = _add_difference(grouped, scaled, 1)
            if rebuild:
                rebuild_saved(scaled, difference, torch.sub, first_values, values)
        else:
            combined = _add_difference(grouped, difference, coefficient)
    else:  # only V_0 − V to lay out: one view (generation, and models that do not rebuild)
        grouped, difference = _aligned(output, first_values - values)
        combined = _add_difference(grouped, difference, coefficient)
    if rebuild:
        rebuild_saved(output, output, _without_term, combined, first_values, values, coefficient)
    return (combined.flatten(2, 3) if combined.dim() == 5 else combined, *rest)


def may_recompute_saved() -> bool:
    """Whether a saved tensor may be swapped for a recipe: only with a backward pass, and not under torch.compile or
    torch.func's transforms (`grad`, `vmap`: per-sample gradients), whose tensors are wrappers without storage."""
    return (
        torch.is_grad_enabled()
        and not torch.compiler.is_compiling()
        and not torch._C._are_functorch_transforms_active()
    )


def _add_difference(grouped, difference, coefficient):
    """``output + λ (V_0 − V)``, both laid out by `_aligned`; in place where no gradient is needed (inference: no new
    tensor)."""
    if torch.is_grad_enabled() and (grouped.requires_grad or difference.requires_grad):
        return grouped.add(difference, alpha=coefficient)
    return grouped.add_(difference, alpha=coefficient)


def _aligned(output: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """`output` (batch, queries, heads, d) and tensors shaped as V (V_0 and V, say) laid out to be combined with it:
    all as (batch, queries, heads, d) when V is merged or has one key/value head per query head (the usual case, in
    the fewest view operations), else the output as (batch, queries, kv heads, group, d) and the others to broadcast
    over each group."""
    if tensors[0].dim() == 3:
        return output, *(tensor.unflatten(-1, output.shape[-2:]) for tensor in tensors)
    tensors = [tensor.transpose(1, 2) for tensor in tensors]
    if tensors[0].shape[2] == output.shape[2]:
        return output, *tensors
    return grouped_heads(output, tensors[0].shape[2]), *(tensor.unsqueeze(3) for tensor in tensors)


def grouped_heads(output: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """(batch, queries, heads, d) as (batch, queries, kv heads, group, d): the query heads of each key/value head."""
    return output.unflatten(2, (kv_heads, output.shape[2] // kv_heads))


def _without_term(combined, first_values, values, coefficient):
    """The backend's output from the output with the term, ``combined − λ V_0 + λ V``, all laid out by `_aligned` in
    the forward pass, as the backend's output (batch, queries, heads, d). Equal up to rounding, which is all its use
    needs (the backend's backward pass reads it in softmax's Σ dO·O). Two kernels and no temporary."""
    if isinstance(coefficient, torch.Tensor):
        rebuilt = torch.addcmul(combined, first_values, coefficient, value=-1).addcmul_(values, coefficient)
    else:
        rebuilt = torch.sub(combined, first_values, alpha=coefficient).add_(values, alpha=coefficient)
    return rebuilt.flatten(2, 3) if rebuilt.dim() == 5 else rebuilt


# Autograd nodes of one input that view or copy it: the backend's output reaches its caller through these (a
# `transpose(1, 2).contiguous()`), and the operation before them is the one that saved what is swapped.
_PASSED_NODES = frozenset(
    {
        "AliasBackward0",
        "CloneBackward0",
        "AsStridedBackward0",
        "PermuteBackward0",
        "ReshapeAliasBackward0",
        "SqueezeBackward0",
        "SqueezeBackward1",
        "TransposeBackward0",
        "UnsafeViewBackward0",
        "UnsqueezeBackward0",
        "ViewBackward0",
    }
)
# (autograd node class, rebuild function) -> the names of the saved tensors that rebuild swapped there last
_SWAPPED: dict[tuple, tuple[str, ...]] = {}


def rebuild_saved(result: torch.Tensor, kept: torch.Tensor, function, *arguments) -> int:
    """Drop every tensor over `kept`'s memory (in any shape and strides of it) that the operation which made `result`
    (seen through views and copies) saved for its backward pass, and have the backward pass rebuild it with
    `function(*arguments)`, which returns what `kept` holds, in its shape (best in its layout too, else it is copied
    into it). The arguments are taken as they are now, detached (a learnable coefficient is the forward pass's own
    copy, which an optimizer step does not change); one changed in place before the backward pass reads it is an
    error there. Returns how many saved tensors were swapped.

    The swap is a pair of hooks on that one saved tensor (`register_hooks`), called once when it is set and once per
    backward pass that reads it: Python runs for it alone, not for everything the backend saves. Where the tensor
    already has hooks (`torch.autograd.graph.saved_tensors_hooks`, such as `save_on_cpu` or activation
    checkpointing, around the call), those keep it as they decide."""
    node = result.grad_fn
    while node is not None and type(node).__name__ in _PASSED_NODES:
        node = node.next_functions[0][0]
    if node is None:
        return 0
    key = (type(node), function)
    found = _swap_saved(node, _SWAPPED.get(key, ()), kept, function, arguments)
    if not found:  # the first call, or one whose backend saved it elsewhere: every tensor the node saves
        found = _swap_saved(node, _saved_names(node), kept, function, arguments)
        if found:  # the next call of this node class and rebuild looks there first
            _SWAPPED[key] = tuple(found)
    return len(found)


def _saved_names(node) -> tuple[str, ...]:
    """The saved tensors of an autograd node, by name (`_saved_<name>`), or by position for a custom
    `autograd.Function` (flash-attn's, say), which saves `ctx.saved_tensors`."""
    names = tuple(name[11:] for name in dir(node) if name.startswith("_raw_saved_"))
    return tuple(map(str, range(len(node.saved_tensors)))) if names == ("tensors",) else names


def _swap_saved(node, names, kept, function, arguments) -> list[str]:
    """Swap the tensors of `node` named `names` that lie over `kept`'s memory for its rebuild; the names swapped."""
    address, frozen, versions, swapped = kept.data_ptr(), None, None, []
    for name in names:
        position = int(name) if name.isdigit() else None
        tensor = getattr(node, "_saved_" + name) if position is None else node.saved_tensors[position]
        if not isinstance(tensor, torch.Tensor) or tensor.data_ptr() != address:
            continue
        if tensor.numel() != kept.numel() or tensor.dtype != kept.dtype:
            continue
        if frozen is None:
            frozen = [a.detach() if isinstance(a, torch.Tensor) else a for a in arguments]
            versions = [a._version if isinstance(a, torch.Tensor) else None for a in frozen]
        # what to call, the kept layout, and the saved tensor's view of it: no reference to either tensor
        view = (tensor.size(), tensor.stride(), tensor.storage_offset() - kept.storage_offset())
        recipe = (function, frozen, versions, kept.stride(), kept.dtype, view)
        raw = getattr(node, "_raw_saved_" + name) if position is None else node._raw_saved_tensors[position]
        try:
            raw.register_hooks(lambda _, recipe=recipe: recipe, _rebuilt)
        except RuntimeError:  # hooks of a surrounding `saved_tensors_hooks` context have it already
            continue
        swapped.append(name)
    return swapped


def _rebuilt(recipe) -> torch.Tensor:
    """The unpack hook of a swapped saved tensor: rebuilt, without a graph, and seen as it was saved. Its arguments
    are detached, so that needs no `torch.no_grad()` context (which would cost more Python calls than the rebuild).
    One of them changed in place since the forward pass (a detached tensor shares its version counter) would rebuild
    another tensor and give wrong gradients, so that is an error, as autograd's own for a saved tensor changed in
    place; the backend's own copy, where nothing else saves the argument, would have been right."""
    function, arguments, versions, stride, dtype, (size, saved_stride, offset) = recipe
    for argument, version in zip(arguments, versions):
        if version is not None and argument._version != version:
            raise RuntimeError(
                f"A tensor of shape {list(argument.shape)} that the backward pass rebuilds an attention backend's "
                f"saved output from (by {function.__name__}: the attention output as a value path changed it, V_ℓ, "
                f"V_0 or a coefficient) was modified in place after the forward pass: it is at version "
                f"{argument._version}, saved at {version}, so the gradients would be wrong. Modify a copy "
                "(`.clone()`), or have the backend keep its own output: run the forward pass inside "
                "`torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)`."
            )
    rebuilt = function(*arguments)
    if rebuilt.dtype != dtype or not _same_layout(rebuilt, stride):  # copied into the kept layout
        rebuilt = torch.empty_strided(rebuilt.shape, stride, dtype=dtype, device=rebuilt.device).copy_(rebuilt)
    return rebuilt.as_strided(size, saved_stride, rebuilt.storage_offset() + offset)


def _same_layout(tensor: torch.Tensor, stride: tuple[int, ...]) -> bool:
    """Whether `tensor` lies in memory as a tensor of its shape with strides `stride` (a dimension of size 1 may have
    any stride)."""
    own = tensor.stride()
    return own == stride or all(a == b or size == 1 for a, b, size in zip(own, stride, tensor.shape))


def run_function(function, for_transforms, *inputs):
    """``function.apply(*inputs)`` for an autograd Function whose forward is ``compute`` then ``keep(ctx, inputs,
    outputs)``; under torch.func's transforms (`grad`, `vmap`: per-sample gradients) ``for_transforms.apply``, the
    same Function in their form (`forward` without ctx, `setup_context` = keep, a generated vmap rule), which they
    need. Both forms exist because `apply` binds the arguments of that form by their signature, about 30 µs a call
    on a CPU: host time per layer in a training step."""
    if torch._C._are_functorch_transforms_active():
        return for_transforms.apply(*inputs)
    return function.apply(*inputs)
