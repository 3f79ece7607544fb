"""The default coefficient of each `apply_value_path` method.

A flat sibling of `value_path.py`, which imports it, so it travels with every checkpoint saved with a value path. It
imports nothing, so that the command line shows these defaults without importing torch (a fast `hf-neutreno --help`).
"""

# λ = 0.4: the official WikiText-103 code and ResFormer's NeuTRENO port (the official DeiT code uses 0.6);
# α = 1/2: ResFormer's identity value residual.
# XSA: strength 1, the paper's whole removal of the own-value component. Value embeddings: g = 1, modded-nanogpt's
# V + E[token].
DEFAULT_COEFFICIENTS = {"neutreno": 0.4, "value_residual": 0.5, "twicing": 1.0, "xsa": 1.0, "value_embedding": 1.0}
# A learnable XSA strength starts at 0, the model's own function (modded-nanogpt's tanh(α) from α = 0); so does a
# learnable value-embedding weight (its tables start random, so that the weight has a gradient).
LEARNABLE_STARTS = {"xsa": 0.0, "value_embedding": 0.0}
