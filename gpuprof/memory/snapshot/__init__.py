"""The snapshot reader: a PyTorch CUDA memory snapshot pickle into :class:`~gpuprof.memory.model.MemoryData`.

:mod:`.read` (load, parse, dump) opens the input through :mod:`.safeload` (the restricted unpickler); a large
file streams through :mod:`.stream` over :mod:`.pickstream` (its opcodes: :mod:`.pickops`; the parts it hands
on: :mod:`.pickshape`); :mod:`.parse` builds the model, whole or streamed alike. The entry points load on
first use, so the unpickler alone (the TensorBoard tab's child process) loads no parser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuprof.lazyexports import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from gpuprof.memory.snapshot.read import SNAPSHOT_PICKLE_PROTOCOL, dump_snapshot, load_snapshot, parse_snapshot

__all__ = ["SNAPSHOT_PICKLE_PROTOCOL", "dump_snapshot", "load_snapshot", "parse_snapshot"]

__getattr__, __dir__ = lazy_exports(__name__, {name: "read" for name in __all__}, globals(), __all__)
