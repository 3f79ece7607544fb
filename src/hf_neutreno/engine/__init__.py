"""The experiment engine: the variant registry, the paired runner, tasks and the `compare` job."""
