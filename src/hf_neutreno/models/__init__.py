"""The files that travel with a checkpoint (`trust_remote_code`).

Each is a flat sibling that imports only torch, transformers and the others; `save_pretrained` copies the model's
file and its relative imports next to the weights. Nothing here registers anything: `hf_neutreno/__init__.py` does.
"""
