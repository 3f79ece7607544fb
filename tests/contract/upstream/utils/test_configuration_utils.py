# Vendored from transformers 5.24.0: `tests/utils/test_configuration_utils.py` (STUB: not in sdist transformers-5.24.0.tar.gz).
# Written by tests/contract/refresh.py (do not edit; refresh instead). Imports of upstream's `tests` tree
# point at this vendored copy. Upstream's Apache-2.0 notice follows (LICENSE beside this file).
"""STUB of upstream's `tests/utils/test_configuration_utils.py`, which the sdist does not ship: only
`config_common_kwargs` (what `test_configuration_common.py` imports), as upstream writes it for transformers 5's
`PreTrainedConfig`: every common argument, none at its default."""

config_common_kwargs = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["BertModel"],
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
}
