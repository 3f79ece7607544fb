# Vendored from transformers 5.24.0: `tests/exporters/test_export.py` (STUB: not in sdist transformers-5.24.0.tar.gz).
# Written by tests/contract/refresh.py (do not edit; refresh instead). Imports of upstream's `tests` tree
# point at this vendored copy. Upstream's Apache-2.0 notice follows (LICENSE beside this file).
"""STUB of upstream's `tests/exporters/test_export.py`, which the sdist does not ship: `ExportTesterMixin`, the base
class of `ModelTesterMixin`, without its tests (torch.export, ONNX, ExecuTorch); `refresh.py --source DIR` vendors the
real file."""


class ExportTesterMixin:
    pass
