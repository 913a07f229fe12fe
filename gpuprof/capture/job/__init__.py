"""The whole-job watch behind the capture: the sampler, phases, further windows, the trigger and the hang watchdog (docs/run.md)."""
