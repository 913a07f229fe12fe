"""``gpuprof run``: profile an unchanged training script or launcher job (docs/run.md)."""
