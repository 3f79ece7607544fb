"""Data, transforms and metrics: dataset loading, text and image pipelines, corruptions, scores."""
