"""The whole job: ``gpuprof run`` (launcher, step clock), the watch over every step, recorded windows,
on-demand triggers and the hang watchdog (docs/run.md)."""
