"""transformers' model contract (ModelTesterMixin) on model classes adapted with a value path: `value_path_class(Base)`
is `ValuePath<Base>`, which applies `config.value_path` in `__init__`, as a checkpoint saved adapted loads.

Every method (NeuTRENO, the value residual, twicing, XSA, value embeddings; learnable coefficients; the gates) on
GPT-2 (fused `c_attn`), a grouped-query Llama (4 query heads, 2 key/value heads), Qwen2 (q/k/v biases), BERT and ViT,
at upstream's 2 layers (the rule acts in layer 1; twicing and XSA in both, value embeddings in the last); value
embeddings on the causal language models only. The fast tier runs one or two methods per model class, together every
method once; the slow tier the other combinations. This package's own NeuTRENO GPT and ViT classifier (their term
off), and LLaVA with its language model named as the `stack`, run a few methods each.
"""

import unittest

import pytest
from contract_common import (
    BASE_MODEL_SKIPS,
    RUN_SLOW,
    SHAPE,
    GenerationTesterMixin,
    LabelsLike,
    ModelTesterMixin,
    PatchEmbeddings,
    TextTester,
    VisionTester,
    VisionTextTester,
    deviations,
)
from transformers import (
    BertConfig,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    GPT2Model,
    LlamaConfig,
    LlamaForCausalLM,
    LlavaConfig,
    LlavaForConditionalGeneration,
    Qwen2Config,
    Qwen2ForCausalLM,
    ViTConfig,
    ViTForImageClassification,
    ViTModel,
)

from hf_neutreno import NeuTRENOGPTConfig, NeuTRENOGPTForCausalLM, NeuTRENOViTConfig, NeuTRENOViTForImageClassification
from hf_neutreno.value_path import value_path_class

# method -> config.value_path (`layers` left to the default: every layer after the first, or all for twicing)
METHODS = {
    "neutreno": dict(method="neutreno", coefficient=0.5, learnable=False),
    "neutreno_learnable": dict(method="neutreno", coefficient=0.5, learnable=True),
    "value_residual": dict(method="value_residual", coefficient=0.5, learnable=False),
    "value_residual_learnable": dict(method="value_residual", coefficient=0.5, learnable=True),
    "value_residual_gate": dict(method="value_residual", coefficient=0.5, learnable="gate"),
    "twicing": dict(method="twicing", coefficient=1.0, learnable=False),
    "xsa": dict(method="xsa", coefficient=1.0, learnable=False),
    "xsa_learnable": dict(method="xsa", coefficient=0.5, learnable=True),
    "value_embedding": dict(method="value_embedding", coefficient=1.0, learnable=False),
    "value_embedding_gate": dict(method="value_embedding", coefficient=1.5, learnable="gate"),
}
# Value embeddings index a table by token id: causal language models only (the others refuse them).
CAUSAL_ONLY = ("value_embedding", "value_embedding_gate")

TEXT = dict(vocab_size=99, bos_token_id=1, eos_token_id=2, pad_token_id=0)
DECODER = dict(SHAPE, num_key_value_heads=2, max_position_embeddings=64, **TEXT)  # grouped-query: 4 / 2 heads
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
GPT2 = dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **TEXT)
VIT = dict(SHAPE, num_labels=3, **NO_DROPOUT)
NEUTRENO_GPT = dict(
    SHAPE,
    max_position_embeddings=64,
    neutreno_lambda=0.0,
    **TEXT,
    **dict.fromkeys(("embedding_dropout", "hidden_dropout", "activation_dropout", "output_dropout"), 0.0),
)
NEUTRENO_VIT = dict(SHAPE, num_labels=3, neutreno_lambda=0.0)
LLAVA = dict(  # the grouped-query Llama beside a CLIP vision tower; placeholder 60, above the text's ids
    text_config=dict(DECODER, model_type="llama"),
    vision_config=dict(SHAPE, model_type="clip_vision_model", image_size=16, patch_size=4),
    image_token_index=60,
    vision_feature_layer=-1,  # as upstream's LLaVA tester (the default -2 is lost when only some layers are captured)
)
# Models of several stacks: the one each adapts (`stack`)
STACKS = {LlavaForConditionalGeneration: "model.language_model.layers"}

# model class -> (tester, config class, config fields, tester options)
ARCHITECTURES = {
    GPT2LMHeadModel: (TextTester, GPT2Config, GPT2, {}),
    GPT2Model: (TextTester, GPT2Config, GPT2, {}),
    LlamaForCausalLM: (TextTester, LlamaConfig, DECODER, {}),
    Qwen2ForCausalLM: (TextTester, Qwen2Config, DECODER, {}),
    BertModel: (TextTester, BertConfig, dict(SHAPE, **TEXT, **NO_DROPOUT), dict(token_type_ids=True)),
    ViTModel: (VisionTester, ViTConfig, VIT, {}),
    ViTForImageClassification: (VisionTester, ViTConfig, VIT, {}),
    NeuTRENOGPTForCausalLM: (TextTester, NeuTRENOGPTConfig, NEUTRENO_GPT, {}),
    NeuTRENOViTForImageClassification: (VisionTester, NeuTRENOViTConfig, NEUTRENO_VIT, {}),
    LlavaForConditionalGeneration: (VisionTextTester, LlavaConfig, LLAVA, {}),
}
# This package's classes: upstream picks labels by class name (of a transformers class)
LABELS_LIKE = {NeuTRENOGPTForCausalLM: GPT2LMHeadModel, NeuTRENOViTForImageClassification: ViTForImageClassification}
# The classes that run a few methods: this package's, and LLaVA (the methods' rules run in its language model as in
# Llama's; these hold the parts a second stack touches: a learnable coefficient, the gate's hook, a Function)
FEW_METHODS = {
    LlavaForConditionalGeneration: ("neutreno_learnable", "value_residual_gate", "xsa"),
    NeuTRENOGPTForCausalLM: ("value_residual_gate", "twicing", "value_embedding_gate"),
    NeuTRENOViTForImageClassification: (
        "neutreno_learnable",
        "value_residual",
    ),
}
VISION = (ViTModel, ViTForImageClassification, NeuTRENOViTForImageClassification)
CAUSAL_LMS = (GPT2LMHeadModel, GPT2Model, LlamaForCausalLM, Qwen2ForCausalLM, NeuTRENOGPTForCausalLM)

# The fast tier's methods of each model class: every method once.
FAST = {
    GPT2LMHeadModel: ("neutreno",),
    GPT2Model: ("twicing", "value_embedding"),
    LlamaForCausalLM: ("value_residual_gate",),
    Qwen2ForCausalLM: ("xsa_learnable",),
    BertModel: ("neutreno_learnable",),
    ViTModel: ("value_residual_learnable",),
    ViTForImageClassification: ("xsa",),
    NeuTRENOGPTForCausalLM: ("value_embedding_gate",),
    NeuTRENOViTForImageClassification: ("value_residual",),
    LlavaForConditionalGeneration: ("neutreno_learnable",),
}


def methods_of(base) -> tuple[str, ...]:
    """The methods the contract runs on `base`."""
    if base in FEW_METHODS:
        return FEW_METHODS[base]
    return tuple(method for method in METHODS if base in CAUSAL_LMS or method not in CAUSAL_ONLY)


# Upstream tests that do not apply to an adapted model, for every architecture and method.
BACKEND_FIXED = (
    "an adapted model's attention backend is fixed when it is adapted: a later set_attn_implementation is refused at "
    "the next forward (value_path._begin_forward; switch with remove_value_path, then apply_value_path)"
)
SKIPS = {
    "test_eager_matches_sdpa_inference": BACKEND_FIXED,  # deep-copies the model and switches it to eager
    "test_can_set_attention_dynamically": BACKEND_FIXED,
    "test_sdpa_can_dispatch_non_composite_models": (
        "upstream checks config._attn_implementation == 'sdpa' by name; an adapted model's is 'value_path-sdpa'"
    ),
    "test_torch_save_load": (
        "upstream's check_equal calls `state_dict()` (a dict) for bool tensors, a TypeError in the test itself; "
        "adapted models carry an empty bool buffer, their marker"
    ),
    "test_attention_outputs": (
        "transformers' config takes `output_attentions = True` only with the implementation named 'eager' "
        "(PreTrainedConfig.output_attentions raises ValueError otherwise); an adapted model's is 'value_path-eager'. "
        "The per-call `output_attentions=True` returns the attention maps (tests/test_value_path.py)"
    ),
    "test_training_gradient_checkpointing_use_reentrant_true": (
        "refused by design: reentrant checkpointing runs layer 0 without gradients and would drop V_0's gradient; "
        "the RuntimeError names the fix (use_reentrant=False, transformers' default, passes)"
    ),
}
# Upstream tests that do not apply to value embeddings, whose tables are looked up by token id.
BY_TOKEN_ID = "value embeddings look their tables up by token id; a call with inputs_embeds alone is refused"
CAUSAL_ONLY_SKIPS = dict.fromkeys(("test_inputs_embeds", "test_inputs_embeds_matches_input_ids"), BY_TOKEN_ID)
# Upstream tests that the native class fails alike (run on LlavaForConditionalGeneration itself, unadapted).
NATIVE_SKIPS = {
    LlavaForConditionalGeneration: {
        "test_training_gradient_checkpointing": "LLaVA reads the vision tower's hidden states, not its post_layernorm, "
        "whose parameters get no gradient: the native class fails this test alike",
        "test_training_gradient_checkpointing_use_reentrant_false": "as test_training_gradient_checkpointing",
        "test_multimodal_outputs_are_returned": BACKEND_FIXED + " (it switches the model to eager)",
    }
}
# Known bugs, (model class or None for all, method or None for all) -> {test: "BUG: ..."}.
BUGS = {}


class ValuePathCase(LabelsLike, ModelTesterMixin, unittest.TestCase):
    base = None  # the transformers class adapted
    method = None  # a key of METHODS

    def setUp(self):
        tester, config_class, fields, options = ARCHITECTURES[self.base]
        extras = {
            "value_path": dict(METHODS[self.method], **({"stack": STACKS[self.base]} if self.base in STACKS else {}))
        }
        self.model_tester = tester(self, config_class, fields, extras, **options)


def _bugs(base, method) -> dict:
    found = {}
    for (bug_base, bug_method), tests in BUGS.items():
        if bug_base in (None, base) and bug_method in (None, method):
            found.update(tests)
    return found


def _same_dtype_loading(base, method) -> dict:
    """test_bc_torch_dtype (about 1 s a class on the CPU, the slow tier's longest test) once per model class among the
    fixed-coefficient methods: they add no parameter, so ValuePath<Base> loads every dtype alike with each. The
    learnable coefficients and gates add parameters of their own: their classes all run it."""
    fixed = [
        name
        for name in methods_of(base)
        if METHODS[name]["learnable"] is False and name not in CAUSAL_ONLY  # value embeddings add tables
    ]
    runs = next((name for name in FAST[base] if name in fixed), fixed[0])
    if method not in fixed or method == runs:
        return {}
    reason = f"a fixed coefficient adds no parameter: dtypes load as with {runs!r}, whose test_bc_torch_dtype runs"
    return {"test_bc_torch_dtype": reason}


def _test_class(base, method, case=ValuePathCase):
    adapted = value_path_class(base)
    bases = [case]
    if base in VISION:
        bases.insert(0, PatchEmbeddings)
    if adapted.can_generate():
        bases.insert(0, GenerationTesterMixin)
    attributes = dict(
        base=base,
        method=method,
        all_model_classes=(adapted,),
        labels_like=LABELS_LIKE.get(base, base),  # upstream picks labels by class name; ValuePath<Base>: its base's
        test_resize_embeddings=base not in VISION,
        # upstream runs it only for models added from 2023 (by the config file's copyright line); the coefficients and
        # gates a value path adds are new, and the adapted class must initialise its base's weights as the base does
        test_can_init_all_missing_weights_before_2023=True,
        __module__=__name__,
        __doc__=f"ValuePath{base.__name__} with config.value_path = {METHODS[method]}.",
    )
    name = f"ValuePath{base.__name__}_{method}_Test"
    cls = type(name, tuple(bases), attributes)
    skips = {**SKIPS, **(BASE_MODEL_SKIPS if base in (GPT2Model, BertModel, ViTModel) else {})}
    skips.update(_same_dtype_loading(base, method))
    skips.update(NATIVE_SKIPS.get(base, {}))
    if method in CAUSAL_ONLY:
        skips.update(CAUSAL_ONLY_SKIPS)
    cls = deviations(skips=skips, bugs=_bugs(base, method))(cls)
    if method not in FAST[base]:
        cls = pytest.mark.slow(cls)
    return name, cls


# The slow tier's classes exist only with RUN_SLOW=1: thousands of skipped tests would cost the fast tier ~20 s.
COMBINATIONS = [
    (base, method) for base in ARCHITECTURES for method in methods_of(base) if RUN_SLOW or method in FAST[base]
]
for _base, _method in COMBINATIONS:
    _name, _cls = _test_class(_base, _method)
    globals()[_name] = _cls

del ValuePathCase, _base, _method, _name, _cls  # bases and loop names, not test classes


@pytest.mark.slow
def test_the_slow_tier_has_every_combination():
    """With RUN_SLOW=1 every method runs on every model class (in the fast tier, one method per class)."""
    assert len(COMBINATIONS) == sum(len(methods_of(base)) for base in ARCHITECTURES)


def test_the_fast_tier_runs_every_method():
    fast = [method for base, methods in FAST.items() if base not in STACKS for method in methods]
    assert sorted(fast) == sorted(METHODS)  # each once on a model of one stack; LLaVA's stack runs one more
    assert all(set(FAST[base]) <= set(methods_of(base)) for base in ARCHITECTURES)
