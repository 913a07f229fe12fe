"""Running a whole job under gpuprof: the launcher, the watch over every step, windows and hangs (docs/run.md)."""
