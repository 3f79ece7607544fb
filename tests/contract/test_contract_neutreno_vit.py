"""transformers' model contract (ModelTesterMixin, ConfigTester) on the NeuTRENO ViT, its Segmenter and EigenViT, with
the NeuTRENO term on (λ = 0.5 in layer 1; layer 0 gives V_0)."""

import unittest

from contract_common import (
    BASE_MODEL_SKIPS,
    SHAPE,
    ConfigChecks,
    LabelsLike,
    ModelTesterMixin,
    PatchEmbeddings,
    VisionTester,
    deviations,
)
from transformers import BeitForSemanticSegmentation, ViTForImageClassification

from hf_neutreno import (
    EigenViTConfig,
    EigenViTForImageClassification,
    EigenViTModel,
    NeuTRENOViTConfig,
    NeuTRENOViTForImageClassification,
    NeuTRENOViTForSemanticSegmentation,
    NeuTRENOViTModel,
)

FIELDS = dict(SHAPE, neutreno_lambda=0.5, num_labels=3)  # tests/tiny_models.py's TINY_VIT at upstream's 2 layers
CONFIG_FIELDS = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2)


class VisionCase(LabelsLike, PatchEmbeddings, ModelTesterMixin, unittest.TestCase):
    config_class = NeuTRENOViTConfig
    hidden_states_types = 1
    test_resize_embeddings = False
    test_can_init_all_missing_weights_before_2023 = True  # upstream dates a model by its config file's copyright line

    def setUp(self):
        self.model_tester = VisionTester(self, self.config_class, FIELDS, hidden_states_types=self.hidden_states_types)


@deviations(skips=BASE_MODEL_SKIPS)
class NeuTRENOViTModelTest(ConfigChecks, VisionCase):
    all_model_classes = (NeuTRENOViTModel,)
    config_fields = CONFIG_FIELDS
    config_has_text_modality = False


@deviations()
class NeuTRENOViTForImageClassificationTest(VisionCase):
    all_model_classes = (NeuTRENOViTForImageClassification,)
    labels_like = ViTForImageClassification


@deviations()
class NeuTRENOViTForSemanticSegmentationTest(VisionCase):
    all_model_classes = (NeuTRENOViTForSemanticSegmentation,)
    labels_like = BeitForSemanticSegmentation
    # `hidden_states` are the encoder's and `decoder_hidden_states` the mask transformer's: two kinds
    hidden_states_types = 2


@deviations(skips=BASE_MODEL_SKIPS)
class EigenViTModelTest(ConfigChecks, VisionCase):
    all_model_classes = (EigenViTModel,)
    config_class = EigenViTConfig
    config_fields = CONFIG_FIELDS
    config_has_text_modality = False


@deviations()
class EigenViTForImageClassificationTest(VisionCase):
    all_model_classes = (EigenViTForImageClassification,)
    config_class = EigenViTConfig
    labels_like = ViTForImageClassification


del VisionCase  # a base, not a test class
