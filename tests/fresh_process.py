"""Run code in a fresh Python process where `hf_neutreno` cannot be imported (or, asked, where it can).

This is how a user without the package meets a checkpoint: only the code files saved next to the weights
(`trust_remote_code=True`) may define the model. The process gets a clean HF_HOME and HF_HUB_OFFLINE=1.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

_BLOCK_PACKAGE = """
import sys
class _BlockHfNeutreno:
    def find_spec(self, name, path=None, target=None):
        if name == "hf_neutreno" or name.startswith("hf_neutreno."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: the checkpoint must carry its own code)")
sys.meta_path.insert(0, _BlockHfNeutreno())
"""


def run_fresh(
    code: str, workdir: Path, hf_home: Path | None = None, timeout: int = 300, block_package: bool = True
) -> str:
    """Run `code` with the package blocked (unless `block_package=False`: a new process with nothing of the test's in
    memory); returns stdout, raises with stderr on failure."""
    workdir = Path(workdir)
    hf_home = Path(hf_home) if hf_home is not None else workdir / "hf_home"
    hf_home.mkdir(parents=True, exist_ok=True)
    script = workdir / "fresh_process_script.py"
    script.write_text((_BLOCK_PACKAGE if block_package else "") + textwrap.dedent(code))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # One thread, as the tests (conftest.py): the same matmul order, so "identical logits" means bit-identical.
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise AssertionError(f"fresh process failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
    return proc.stdout


def load_fresh(model, inputs: dict, folder: Path, report: str = "None", auto_class: str = "AutoModelForCausalLM"):
    """Save `model` to `folder`, load it with `auto_class` in a fresh process without the package (the checkpoint's
    own code, `trust_remote_code=True`) and run it there on `inputs`. Returns the largest absolute difference of its
    logits from `model`'s logits here, and the value of the expression `report` there (JSON; the loaded model is
    `model`)."""
    import json

    import torch

    folder = Path(folder)
    with torch.no_grad():
        expected = model(**inputs).logits
    model.save_pretrained(folder)
    torch.save({"inputs": inputs, "expected": expected}, folder.parent / "expected.pt")
    code = f"""
        import json, torch
        from transformers import {auto_class}
        saved = torch.load({str(folder.parent / "expected.pt")!r})
        model = {auto_class}.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
        with torch.no_grad():
            difference = (model(**saved["inputs"]).logits - saved["expected"]).abs().max().item()
        print(json.dumps([difference, {report}]))
        """
    return json.loads(run_fresh(code, folder.parent).strip().splitlines()[-1])


def make_local_hub_cache(hf_home: Path, repo_id: str, folder: Path) -> None:
    """Lay `folder` out as a cached Hub snapshot, so `from_pretrained(repo_id)` resolves it offline."""
    org, name = repo_id.split("/")
    root = Path(hf_home) / "hub" / f"models--{org}--{name}"
    sha = hashlib.sha1(repo_id.encode()).hexdigest()
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(sha)
    shutil.copytree(folder, root / "snapshots" / sha)
