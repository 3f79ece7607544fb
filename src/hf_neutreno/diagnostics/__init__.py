"""Analyses of trained and untrained models (over-smoothing, spectra). Plain code: never copied with a checkpoint."""

from .spectral import SpectralDominance, head_factors, spectral_dominance

__all__ = ["SpectralDominance", "head_factors", "spectral_dominance"]
