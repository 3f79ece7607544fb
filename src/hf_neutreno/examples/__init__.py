"""What the example scripts (the repository's `examples/run_*.py`) share: the papers' training recipes (`recipes`),
Mixup/CutMix with its soft-target loss (`mixup`), and the scripts' argument parsing, resuming and output folders
(`scripts`)."""
