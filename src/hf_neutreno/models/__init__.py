"""This package's configs and models, and the value path on any transformers model (`value_path.py`): the files that
travel with a checkpoint (`trust_remote_code`), each written once.

Each is a flat sibling that imports only torch, transformers and the others; `save_pretrained` copies the model's file
and its relative imports next to the weights. Importing this folder registers nothing (`hf_neutreno.auto_classes`
does), so that the preset tables here can be read without torch.
"""
