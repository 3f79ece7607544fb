"""run_image_classification decays the weights as DeiT does (DeiT's main.py: timm's optimizer factory skips the
model's `no_weight_decay()` = pos_embed, cls_token, dist_token, and every tensor with ndim <= 1)."""

import pytest
from transformers import TrainingArguments

from examples_loader import load_example
from hf_neutreno import (
    EigenViTConfig,
    EigenViTForImageClassification,
    NeuTRENOViTConfig,
    NeuTRENOViTForImageClassification,
)

image = load_example("run_image_classification")
SHAPE = dict(hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=8, image_size=8, patch_size=4)
# DeiT decays the weight matrices and the patch projection's kernel, nothing else: written out for two layers.
LINEAR = ("attention.q_proj", "attention.k_proj", "attention.v_proj", "attention.o_proj", "mlp.fc1", "mlp.fc2")
DECAYED = {
    "vit.embeddings.patch_embeddings.projection.weight",
    "classifier.weight",
    *(f"vit.layers.{i}.{name}.weight" for i in range(2) for name in LINEAR),
}
EIGEN = ("attention.q_proj", "attention.k_proj", "mlp.fc1", "mlp.fc2")  # Θ and ψ replace v_proj and o_proj
EIGEN_DECAYED = {
    "vit.embeddings.patch_embeddings.projection.weight",
    "classifier.weight",
    *(f"vit.layers.{i}.{name}.weight" for i in range(2) for name in EIGEN),
    *(f"vit.layers.{i}.attention.{name}" for i in range(2) for name in ("theta", "psi")),
}


def _decay_groups(model, tmp_path, mixup: bool) -> tuple[set[str], set[str]]:
    """The names in the optimizer's decayed and undecayed groups of the script's trainer."""
    args = TrainingArguments(str(tmp_path), weight_decay=0.05, use_cpu=True, report_to="none")
    data_args = image.DataArguments(mixup_alpha=0.8 if mixup else 0.0)
    trainer = image.build_trainer(model, None, args, data_args, None, None, model.config.num_labels)
    optimizer = trainer.create_optimizer()
    names = {id(p): n for n, p in model.named_parameters()}
    groups = {group["weight_decay"]: {names[id(p)] for p in group["params"]} for group in optimizer.param_groups}
    return groups[0.05], groups[0.0]


@pytest.mark.parametrize("mixup", [False, True], ids=["plain", "mixup"])
def test_the_image_script_decays_only_what_deit_decays(tmp_path, mixup):
    config = NeuTRENOViTConfig(**SHAPE, use_distillation_token=True, featscale=True, num_labels=3)
    model = NeuTRENOViTForImageClassification(config)
    decayed, undecayed = _decay_groups(model, tmp_path, mixup)
    assert decayed == DECAYED
    assert undecayed == {n for n, _ in model.named_parameters()} - DECAYED
    tokens = {"vit.embeddings.position_embeddings", "vit.embeddings.cls_token", "vit.embeddings.distillation_token"}
    assert tokens <= undecayed
    assert "vit.layers.1.attention.featscale_low" in undecayed  # ndim 1


def test_eigen_vit_keeps_theta_and_psi_decayed(tmp_path):
    model = EigenViTForImageClassification(EigenViTConfig(**SHAPE, num_labels=3))
    decayed, undecayed = _decay_groups(model, tmp_path, mixup=False)
    assert decayed == EIGEN_DECAYED
    assert {"vit.embeddings.position_embeddings", "vit.embeddings.cls_token"} <= undecayed


def test_undecayed_names_are_deits():
    from hf_neutreno.examples.weight_decay import no_weight_decay_names

    model = NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**SHAPE, use_distillation_token=True, num_labels=3))
    assert no_weight_decay_names(model) == {n for n, _ in model.named_parameters()} - DECAYED
