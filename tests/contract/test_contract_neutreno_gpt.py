"""transformers' model contract (ModelTesterMixin, GenerationTesterMixin, ConfigTester) on the NeuTRENO GPT, with the
NeuTRENO term on (λ = 0.5 in layer 1; layer 0 gives V_0)."""

import unittest

from contract_common import (
    BASE_MODEL_SKIPS,
    SHAPE,
    ConfigChecks,
    GenerationTesterMixin,
    LabelsLike,
    ModelTesterMixin,
    TextTester,
    deviations,
)
from transformers import GPT2LMHeadModel

from hf_neutreno import NeuTRENOGPTConfig, NeuTRENOGPTForCausalLM, NeuTRENOGPTModel

# tests/tiny_models.py's TINY_NEUTRENO_GPT (no dropout, pad 0) at upstream's 2 layers, with λ = 0.5
FIELDS = dict(
    SHAPE,
    vocab_size=99,
    max_position_embeddings=64,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    neutreno_lambda=0.5,
    **dict.fromkeys(("embedding_dropout", "hidden_dropout", "activation_dropout", "output_dropout"), 0.0),
)


class GPTCase(LabelsLike, ModelTesterMixin, unittest.TestCase):
    labels_like = GPT2LMHeadModel
    test_can_init_all_missing_weights_before_2023 = True  # upstream dates a model by its config file's copyright line

    def setUp(self):
        self.model_tester = TextTester(self, NeuTRENOGPTConfig, FIELDS)


@deviations(skips=BASE_MODEL_SKIPS)
class NeuTRENOGPTModelTest(ConfigChecks, GPTCase):
    all_model_classes = (NeuTRENOGPTModel,)
    config_class = NeuTRENOGPTConfig
    config_fields = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, vocab_size=99)


@deviations()
class NeuTRENOGPTForCausalLMTest(GenerationTesterMixin, GPTCase):
    all_model_classes = (NeuTRENOGPTForCausalLM,)


del GPTCase  # a base, not a test class
