"""The sections of every results page of `experiments/evidence/reproduce.py`, whatever its budget or machine: the
headings its tests look for (test_reproduce.py on the CPU page, test_run_all.py on the GPU tier's)."""

RESULTS_SECTIONS = (
    "## CIFAR-10",
    "## Over-smoothing per layer",
    "## Data efficiency",
    "## Corruption robustness",
    "## Dominating eigenvalue",
    "## WikiText-2",
)
