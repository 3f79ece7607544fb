"""Training recipes: the papers' settings, Mixup/CutMix and what the example scripts share."""
