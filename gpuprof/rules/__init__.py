"""Rules: one module per theme, one class per rule, registered on import.

Importing this package registers every rule; ``gpuprof.rules.base.all_rules()``
lists them. Codes are stable: GP1xx utilisation and data loading, GP2xx copies
and host syncs, GP3xx kernels/launch/precision, GP4xx placement and
parallelism, GP5xx memory, GP8xx torch.compile/CUDA graphs/precision/host habits,
GP9xx trace quality.
"""

import importlib

_MODULES = ("utilization", "dataloader", "copies", "syncs", "runtime", "kernels", "precision", "placement", "memory", "compiled", "layout", "attention", "alignment", "outside", "mfu", "dispatch", "habits", "amp", "pitfalls", "quality")

for _name in _MODULES:
    importlib.import_module(f"gpuprof.rules.{_name}")
