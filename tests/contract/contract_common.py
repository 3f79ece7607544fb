"""What the contract suite's modules share: tiny model testers in the shape upstream's mixins expect, the config
checks as separate tests, and `deviations`, which skips (with the reason) or marks as known bugs the upstream tests
that a class does not meet.

Upstream's mixins are vendored in `upstream/` (see refresh.py). Each test class runs them on one model class, so that
pytest's report counts per class. Upstream caps model testers at 2 layers (`test_num_layers_is_small`): layer 0 gives
V_0 and layer 1 applies the NeuTRENO term (or the value path), so the term is on in every model here.
"""

import contextlib
import functools
import os
import re

import pytest
import torch
from upstream.generation.test_utils import GenerationTesterMixin
from upstream.test_configuration_common import ConfigTester
from upstream.test_modeling_common import ModelTesterMixin, floats_tensor, ids_tensor, random_attention_mask

__all__ = [
    "BASE_MODEL_SKIPS",
    "BUG",
    "CONFIG_CHECKS",
    "ConfigChecks",
    "GenerationTesterMixin",
    "LabelsLike",
    "ModelTesterMixin",
    "PatchEmbeddings",
    "RUN_SLOW",
    "SHAPE",
    "TextTester",
    "VisionTester",
    "VisionTextTester",
    "deviations",
]

RUN_SLOW = os.environ.get("RUN_SLOW", "").strip().lower() in ("1", "true", "yes", "on")  # as tests/conftest.py
LAYERS = 2  # upstream's `test_num_layers_is_small`
SHAPE = dict(hidden_size=32, num_attention_heads=4, intermediate_size=64, num_hidden_layers=LAYERS)
BUG = "BUG: "  # the reason of every strict xfail starts so: the package computes something wrong, or crashes


class Tester:
    """What upstream's mixins read from a model tester: `prepare_config_and_inputs_for_common()`, `batch_size`,
    `seq_length`, `hidden_size`, `num_hidden_layers`, `num_attention_heads`, `is_training`. `make_config(**fields)`
    builds the config; `config_extras` are set on it afterwards (e.g. `value_path`, which no config class declares)."""

    def __init__(self, parent, make_config, fields, config_extras=None, batch_size=2):
        self.parent = parent
        self.make_config, self.fields, self.config_extras = make_config, fields, config_extras or {}
        self.batch_size = batch_size
        config = self.get_config()
        self.hidden_size = config.hidden_size
        self.num_hidden_layers = config.num_hidden_layers
        self.num_attention_heads = config.num_attention_heads
        assert self.num_hidden_layers == LAYERS, "upstream's test_num_layers_is_small"
        self.is_training = True

    def get_config(self):
        config = self.make_config(**self.fields)
        for name, value in self.config_extras.items():
            setattr(config, name, value)
        return config


class VisionTester(Tester):
    """Images in, as upstream's ViTModelTester (16 × 16 pixels, patches of 4): `seq_length` counts the patches and
    the CLS token. `hidden_states_types`: the kinds of hidden states a model returns (the Segmenter's encoder and
    decoder: 2)."""

    image_size, patch_size, num_channels = 16, 4, 3

    def __init__(self, parent, make_config, fields, config_extras=None, hidden_states_types=1):
        size = dict(image_size=self.image_size, patch_size=self.patch_size, num_channels=self.num_channels)
        super().__init__(parent, make_config, {**size, **fields}, config_extras)
        num_patches = (self.image_size // self.patch_size) ** 2
        self.seq_length = num_patches + 1
        self.num_hidden_states_types = hidden_states_types
        # ViT's `bool_masked_pos` (upstream's ViTModelTester: half the tokens masked, over the patches)
        self.num_masks, self.mask_length = self.seq_length // 2, num_patches

    def prepare_config_and_inputs_for_common(self):
        shape = [self.batch_size, self.num_channels, self.image_size, self.image_size]
        return self.get_config(), {"pixel_values": floats_tensor(shape)}


class TextTester(Tester):
    """Token ids in (from 3, above the special tokens pad 0, bos 1, eos 2) and an `attention_mask` with padding at
    the start of some rows (upstream's `random_attention_mask`); `token_type_ids` for BERT."""

    seq_length = 7

    def __init__(self, parent, make_config, fields, config_extras=None, token_type_ids=False):
        super().__init__(parent, make_config, fields, config_extras, batch_size=3)
        self.vocab_size = self.get_config().vocab_size
        self.token_type_ids = token_type_ids

    def prepare_config_and_inputs_for_common(self):
        shape = [self.batch_size, self.seq_length]
        inputs = {
            "input_ids": ids_tensor(shape, self.vocab_size - 3) + 3,
            "attention_mask": random_attention_mask(shape),
        }
        if self.token_type_ids:
            inputs["token_type_ids"] = ids_tensor(shape, 2)
        return self.get_config(), inputs


class VisionTextTester(Tester):
    """A vision-language model (LLaVA's layout: `text_config`, `vision_config`, an image placeholder token): one
    16 × 16 image per row, its 16 placeholder tokens first, then 7 text tokens (from 3, above the special tokens).
    `fields` are the config's; the model's sizes are its text config's, as upstream's LLaVA tester reads them."""

    seq_length, image_size, num_channels, image_tokens = 7 + 16, 16, 3, 16

    def __init__(self, parent, make_config, fields, config_extras=None):
        self.parent, self.make_config, self.fields = parent, make_config, fields
        self.config_extras, self.batch_size, self.is_training = config_extras or {}, 2, True
        text = self.get_config().text_config
        self.hidden_size, self.num_hidden_layers = text.hidden_size, text.num_hidden_layers
        self.num_attention_heads, self.vocab_size = text.num_attention_heads, text.vocab_size
        assert self.num_hidden_layers == LAYERS, "upstream's test_num_layers_is_small"

    def prepare_config_and_inputs_for_common(self):
        config = self.get_config()
        text = ids_tensor([self.batch_size, self.seq_length - self.image_tokens], config.image_token_index - 3) + 3
        images = torch.full((self.batch_size, self.image_tokens), config.image_token_index)
        input_ids = torch.cat([images, text], dim=1)
        pixel_values = floats_tensor([self.batch_size, self.num_channels, self.image_size, self.image_size])
        return config, {
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
            "pixel_values": pixel_values,
        }


# ConfigTester's checks (what upstream's `run_common_tests` runs in one test), one test each here.
CONFIG_CHECKS = (
    "create_and_test_config_common_properties",
    "create_and_test_config_to_json_string",
    "create_and_test_config_to_json_file",
    "create_and_test_config_from_and_save_pretrained",
    "create_and_test_config_from_and_save_pretrained_subfolder",
    "create_and_test_config_from_and_save_pretrained_composite",
    "create_and_test_config_with_num_labels",
    "check_config_arguments_init",
    "create_and_test_config_from_pretrained_custom_kwargs",
    "check_config_can_be_init_without_params",
)


class ConfigChecks:
    """`ConfigTester`'s checks of `config_class` (set by the test class, with `config_fields` and
    `config_has_text_modality`), one test method per check: test_config_<check>."""

    config_fields: dict = {}
    config_has_text_modality = True

    def config_tester(self) -> ConfigTester:
        return ConfigTester(
            self,
            config_class=self.config_class,
            has_text_modality=self.config_has_text_modality,
            **self.config_fields,
        )


def _config_test(check: str):
    def test(self):
        getattr(self.config_tester(), check)()

    test.__name__ = f"test_config_{check}"
    return test


for _check in CONFIG_CHECKS:
    setattr(ConfigChecks, f"test_config_{_check}", _config_test(_check))


# Upstream tests that run in the slow tier only (RUN_SLOW=1), the half-precision ones: on the CPU they cost a third
# of the fast tier's time, and the fp32 cases of the same checks stay fast.
SLOW_TESTS = re.compile(r"test_bc_torch_dtype|test_eager_matches_sdpa_inference_\d+_(fp16|bf16)_\w*")


def _own_copy(function):
    """A new function object running `function`: marks set on it stay with one class (upstream's test functions are
    shared by every class that inherits them)."""

    @functools.wraps(function)
    def copy(self, *args, **kwargs):
        return function(self, *args, **kwargs)

    copy.pytestmark = list(getattr(function, "pytestmark", []))
    return copy


def deviations(skips: dict[str, str] | None = None, bugs: dict[str, str] | None = None):
    """Class decorator of every test class. Each test of `skips` is skipped with its reason (a deliberate deviation:
    a feature the model does not have, an assumption of upstream's that does not hold here); each of `bugs` is a
    strict xfail whose reason starts with "BUG: " (a wrong answer or a crash a user can hit; it must fail until
    fixed). A name matches the test of that name and the tests upstream generates from it with `parameterized`
    (name_<index>_<case>). The tests of SLOW_TESTS are marked for the slow tier."""

    def decorate(cls):
        # (`parameterized` leaves None under the name of the test it expands)
        names = [name for name in dir(cls) if name.startswith("test_") and callable(getattr(cls, name))]
        for table, mark in ((skips or {}, _skip), (bugs or {}, _bug)):
            for pattern, reason in table.items():
                case = re.compile(rf"{re.escape(pattern)}(_\d+(_\w*)?)?")  # parameterized: name_<index>_<case>
                matched = [name for name in names if case.fullmatch(name)]
                if not matched:
                    raise AttributeError(f"{cls.__name__} has no test {pattern!r} to mark")
                for name in matched:
                    setattr(cls, name, mark(reason)(_own_copy(getattr(cls, name))))
        for name in names:
            if SLOW_TESTS.fullmatch(name):
                setattr(cls, name, pytest.mark.slow(_own_copy(getattr(cls, name))))
        return cls

    return decorate


def _skip(reason: str):
    return pytest.mark.skip(reason=reason)


def _bug(reason: str):
    assert reason.startswith(BUG), reason

    def mark(test):
        # Upstream loops over model classes in `self.subTest`, whose failures pytest reports apart from the test (a
        # strict xfail would then pass as XPASS): here the failure is the test's own.
        @functools.wraps(test)
        def without_subtests(self, *args, **kwargs):
            self.subTest = lambda *_, **__: contextlib.nullcontext()
            return test(self, *args, **kwargs)

        return pytest.mark.xfail(strict=True, reason=reason)(without_subtests)

    return mark


# The training tests of a base model (no head, so no loss): upstream leaves base models out by their names in
# transformers' MODEL_MAPPING_NAMES, which do not include this package's classes nor the ValuePath<Model> subclasses.
NO_LOSS = (
    "a base model has no loss; upstream leaves base models out by name (MODEL_MAPPING_NAMES), which omits this class"
)
BASE_MODEL_SKIPS = dict.fromkeys(
    (
        "test_training",
        "test_training_gradient_checkpointing",
        "test_training_gradient_checkpointing_use_reentrant_false",
        "test_training_gradient_checkpointing_use_reentrant_true",
    ),
    NO_LOSS,
)


class LabelsLike:
    """Labels for a class that upstream's `_prepare_for_class` does not know by name: those of `labels_like`, a
    transformers class of the same task (upstream picks the labels from the class's name in transformers' task
    tables, which list neither this package's classes nor the ValuePath<Base> subclasses)."""

    labels_like = None

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        return super()._prepare_for_class(inputs_dict, self.labels_like or model_class, return_labels)


class PatchEmbeddings:
    """`test_model_get_set_embeddings` as upstream's ViT test overrides it (tests/models/vit/test_modeling_vit.py):
    a vision model's input embeddings are its patch projection, not an `nn.Embedding`."""

    def test_model_get_set_embeddings(self):
        config, _ = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            model = model_class(config)
            self.assertIsInstance(model.get_input_embeddings(), torch.nn.Module)
            output = model.get_output_embeddings()
            self.assertTrue(output is None or isinstance(output, torch.nn.Linear))
