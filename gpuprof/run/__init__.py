"""Launching a whole job under gpuprof: the launcher, its options, the site bootstrap, the step clock (docs/run.md)."""
