"""DeiT's weight decay: no decay on the position embeddings, the CLS and distillation tokens, nor on any tensor of
at most one dimension (biases, norms' scales), as DeiT's `main.py` builds its optimizer (timm's `create_optimizer`
with the model's `no_weight_decay()`, `{'pos_embed', 'cls_token', 'dist_token'}`, and timm's
`param_groups_weight_decay`, which leaves every parameter with `ndim <= 1` undecayed).

    class DeiTTrainer(DeiTWeightDecayMixin, Trainer): ...

A model names the tensors it exempts where it defines them: a class attribute `_no_weight_decay` of parameter names
(the last component, e.g. `position_embeddings`) on the model class or any of its modules' classes
(`NeuTRENOViTPreTrainedModel` names its position embeddings, CLS and distillation tokens). Tensors of at most one
dimension are exempt by rule. Trainer's own exemptions (biases, LayerNorm) stay.
"""

from torch import nn


def no_weight_decay_names(model: nn.Module) -> set[str]:
    """The names of `model`'s parameters that DeiT's recipe does not decay: those of at most one dimension and those
    whose last name component a class of `model` or of one of its modules lists in `_no_weight_decay`."""
    declared = set()
    for module in model.modules():
        declared.update(getattr(type(module), "_no_weight_decay", ()))
    return {
        name for name, parameter in model.named_parameters() if parameter.ndim <= 1 or name.split(".")[-1] in declared
    }


class DeiTWeightDecayMixin:
    """A `Trainer` mixin (before `Trainer` in the bases) whose optimizer decays what DeiT's does: Trainer's decayed
    parameters less `no_weight_decay_names(model)`. The names are read off the model the optimizer is built for, so
    under FSDP2 (whose sharded parameters keep their names and dimensions) the groups are the same as in one
    process."""

    def get_decay_parameter_names(self, model: nn.Module) -> list[str]:
        exempt = no_weight_decay_names(model)
        return [name for name in super().get_decay_parameter_names(model) if name not in exempt]


__all__ = ["DeiTWeightDecayMixin", "no_weight_decay_names"]
