"""NeuTRENO's term as Triton kernels, which a GPU runs where Triton is installed (`neutreno_term.py`), checked on the
CPU in Triton's interpreter mode: the reference tests of the models and of the adapter pass with the kernels doing
the term's work, forward, backward and the rebuild of the backend's output. Each reference is independent of the
kernels: plain eager math from the raw weights, or plain autograd."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_process import SRC

pytest.importorskip("triton", reason="Triton (the `test` extra on Linux) runs the term's GPU kernels on the CPU")

TESTS = Path(__file__).resolve().parent
REFERENCE_TESTS = [
    "test_neutreno_vit.py::test_neutreno_vit_equals_eager_reference",
    "test_neutreno_vit.py::test_gradients_equal_the_eager_reference",
    "test_neutreno_vit.py::test_sdpa_training_rebuilds_the_backends_output_and_keeps_the_gradients",
    "test_neutreno_vit.py::test_bf16_autocast_training_step_matches_fp32",
    "test_neutreno_gpt.py::test_neutreno_gpt_equals_eager_reference",
    "test_eigen_vit.py::test_gradients_with_the_neutreno_term_equal_plain_autograd",
    # the adapter against the package's models (checked above against eager math), in training too
    "test_value_path.py::test_gpt2_neutreno_equals_the_packages_neutreno_gpt",
    "test_value_path.py::test_vit_neutreno_equals_the_packages_neutreno_vit",
    "test_value_path.py::test_vit_gradients_equal_the_packages_neutreno_vit",
    "test_value_path.py::test_cached_generation_equals_uncached",
]

# Runs the reference tests in this process with every kernel launch counted, by module and by whether it rebuilds
# the backend's output in a backward pass.
RUNNER = """
import json, sys
import pytest
import hf_neutreno.neutreno_term as source, hf_neutreno.models.neutreno_term as copy

launches, rebuilding = {}, []
for module in (source, copy):
    def launch(kernel, *arguments, _launch=module._launch, _name=module.__name__, **settings):
        key = ":".join([_name, kernel.fn.__name__, *(["rebuild"] if rebuilding else [])])
        launches[key] = launches.get(key, 0) + 1
        return _launch(kernel, *arguments, **settings)

    def rebuild(*arguments, _rebuild=module._without_term_into):
        rebuilding.append(1)
        try:
            return _rebuild(*arguments)
        finally:
            rebuilding.pop()

    module._launch, module._without_term_into = launch, rebuild
code = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:xdist", *sys.argv[1:]])
print("LAUNCHES" + json.dumps(launches))
sys.exit(code)
"""


def test_the_reference_tests_pass_with_the_terms_triton_kernels():
    environment = {**os.environ, "PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1", "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, *REFERENCE_TESTS],
        cwd=TESTS,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    launches = json.loads(proc.stdout.rsplit("LAUNCHES", 1)[1])
    for module in ("hf_neutreno.neutreno_term", "hf_neutreno.models.neutreno_term"):
        # forward (training and inference), both gradients in one kernel, and the rebuild, in the adapter and models
        assert launches.get(f"{module}:_add_scaled_difference_kernel", 0) > 0, launches
        assert launches.get(f"{module}:_term_gradients_kernel", 0) > 0, launches
    assert launches.get("hf_neutreno.models.neutreno_term:_add_scaled_difference_kernel:rebuild", 0) > 0, launches
