"""`hf-neutreno compare` as a library: train attention variants on the same data and budget, paired over seeds, and
compare them.

    from hf_neutreno.engine.compare import CompareSettings, run_comparison

One job in five modules: `run` (the runs and `run_comparison`), `settings` (the settings and their defaults, importable
without torch: the command's `--help` reads them), `output` (the output folder and results.json), `verdict` (the
paired reading and the verdict) and `report` (the table and the plot). This file imports none of them until a name is
asked for, so that `settings` stays free of torch.
"""

import importlib

_MODULE_OF = {"run_comparison": "run", "CompareSettings": "settings", "format_table": "report"}


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_MODULE_OF[name]}", __name__), name)


__all__ = list(_MODULE_OF)
