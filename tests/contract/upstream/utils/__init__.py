# Vendored transformers 5.24.0 test helpers (tests/contract/refresh.py).
