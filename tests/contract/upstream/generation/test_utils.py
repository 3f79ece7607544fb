# Vendored from transformers 5.24.0: `tests/generation/test_utils.py` (STUB: not in sdist transformers-5.24.0.tar.gz).
# Written by tests/contract/refresh.py (do not edit; refresh instead). Imports of upstream's `tests` tree
# point at this vendored copy. Upstream's Apache-2.0 notice follows (LICENSE beside this file).
"""STUB of upstream's `tests/generation/test_utils.py`, which the sdist does not ship: `GenerationTesterMixin` as an
empty marker class, so that `ModelTesterMixin.test_generation_tester_mixin_inheritance` still checks the test classes.
Upstream's generate tests do not run; `refresh.py --source DIR` vendors the real file."""


class GenerationTesterMixin:
    pass
