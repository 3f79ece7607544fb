"""Importing or calling the package changes nothing global: no optimizer or module hooks in torch, no logging
configuration, no matplotlib backend.

Each check runs in a fresh interpreter, so that nothing imported by other tests (or by pytest) hides a change. The
snapshot is taken after torch and transformers are imported: what they do to the process is theirs, not ours.
"""

import json
import os
import subprocess
import sys
import textwrap

from fresh_process import run_fresh
from tiny_models import TINY_VIT

# Prints the process-wide state that a library could change behind its user's back, as JSON.
_SNAPSHOT = """
import json, logging, sys
import torch
import transformers
from torch.nn.modules import module as _module
from torch.optim import optimizer as _optimizer

def snapshot():
    loggers = {"": logging.getLogger()} | {
        name: logger for name, logger in logging.Logger.manager.loggerDict.items() if isinstance(logger, logging.Logger)
    }
    hooks = {name: len(getattr(_optimizer, name)) for name in ("_global_optimizer_pre_hooks",
                                                               "_global_optimizer_post_hooks")}
    hooks |= {name: len(value) for name, value in vars(_module).items() if name.startswith("_global_") and
              isinstance(value, dict)}
    return {
        "hooks": hooks,
        "loggers": {name: [logger.level, [repr(h) for h in logger.handlers], logger.propagate, logger.disabled]
                    for name, logger in loggers.items()},
        "transformers_verbosity": transformers.logging.get_verbosity(),
        "default_dtype": str(torch.get_default_dtype()),
        "grad_enabled": torch.is_grad_enabled(),
        "matplotlib_backend": sys.modules["matplotlib"].get_backend() if "matplotlib" in sys.modules else None,
    }
"""


def run_python(code: str, workdir, env_extra: dict | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HOME=str(workdir / "hf_home"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", **(env_extra or {}))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=workdir, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    return proc.stdout


def assert_unchanged(before: dict, after: dict) -> None:
    assert after["hooks"] == before["hooks"] and all(n == 0 for n in after["hooks"].values()), after["hooks"]
    for key in ("transformers_verbosity", "default_dtype", "grad_enabled", "matplotlib_backend"):
        assert after[key] == before[key], key
    # Loggers that existed keep their configuration; new ones (the package's, or created by lazily imported library
    # modules) must not have been given handlers or levels by this package.
    changed = [name for name, state in before["loggers"].items() if after["loggers"].get(name) != state]
    assert not changed, changed
    ours = {name: state for name, state in after["loggers"].items() if name.startswith("hf_neutreno")}
    assert all(state[:2] == [0, []] for state in ours.values()), ours


def test_importing_and_using_the_package_changes_no_global_state(tmp_path):
    """`import hf_neutreno` and every submodule, then build, train, save and reload an EigenViT (with remote code) and
    convert it: torch's global optimizer hooks stay empty, the logging configuration and the user's matplotlib
    backend stay as they were."""
    out = run_python(
        _SNAPSHOT
        + """
import matplotlib
matplotlib.use("svg")  # the user's choice, which the package must keep
before = snapshot()
import importlib, pkgutil
import hf_neutreno
for info in pkgutil.walk_packages(hf_neutreno.__path__, "hf_neutreno."):
    if not info.name.endswith("__main__"):  # that one runs the CLI
        importlib.import_module(info.name)
after_import = snapshot()

from transformers import AutoModelForImageClassification
from hf_neutreno import EigenViTConfig, EigenViTForImageClassification
from hf_neutreno.convert import neutreno_to_vit
config = EigenViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        image_size=16, patch_size=4, num_labels=3)
model = EigenViTForImageClassification(config)
for fused in (False, True):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused)
    model(torch.randn(2, 3, 16, 16), labels=torch.tensor([0, 1])).loss.backward()
    optimizer.step()
model.save_pretrained("ckpt")
loaded = AutoModelForImageClassification.from_pretrained("ckpt", trust_remote_code=True)
neutreno_to_vit(loaded.eval())
print(json.dumps([before, after_import, snapshot()]))
""",
        tmp_path,
    )
    before, after_import, after_use = json.loads(out.splitlines()[-1])
    assert before["matplotlib_backend"] == "svg"
    assert_unchanged(before, after_import)
    assert_unchanged(before, after_use)


def test_loading_an_eigen_vit_with_remote_code_adds_no_optimizer_hook(tmp_path):
    """A process without the package that loads an EigenViT checkpoint runs only the checkpoint's code: it must not
    hook the optimizers of that process either."""
    from hf_neutreno import EigenViTConfig, EigenViTForImageClassification

    config = EigenViTConfig(**dict(TINY_VIT, num_hidden_layers=2, num_attention_heads=2), num_labels=3)
    EigenViTForImageClassification(config).save_pretrained(tmp_path / "ckpt")
    out = run_fresh(
        _SNAPSHOT
        + """
before = snapshot()
from transformers import AutoModelForImageClassification
model = AutoModelForImageClassification.from_pretrained("ckpt", trust_remote_code=True)
assert type(model).__name__ == "EigenViTForImageClassification" and "hf_neutreno" not in type(model).__module__
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model(torch.randn(2, 3, 16, 16), labels=torch.tensor([0, 1])).loss.backward()
optimizer.step()
print(json.dumps([before, snapshot()]))
""",
        tmp_path,
    )
    before, after = json.loads(out.splitlines()[-1])
    assert_unchanged(before, after)
