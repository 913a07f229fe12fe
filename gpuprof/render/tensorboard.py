"""TensorBoard output of a capture: per-step scalars and the findings as text.

Written with ``torch.utils.tensorboard.SummaryWriter`` (so only the capture
side imports it: it needs torch and the ``tensorboard`` package), read by
``tensorboard --logdir LOGDIR`` offline, in the Scalars and Text tabs.

Scalars (tag: meaning), one point per training step:

* ``gpuprof/step_time_ms``: wall time between two ``step()`` calls.
* ``gpuprof/data_loading_share``: time waiting in ``DataLoader.__next__`` / step time
  (written once a torch DataLoader has been seen).
* ``gpuprof/gpu_utilization``: GPU busy time / step time, recorded steps only
  (from the trace; see ``gpuprof.trace.metrics``).
* ``gpuprof/memory_allocated_mib``, ``gpuprof/memory_reserved_mib``,
  ``gpuprof/memory_peak_mib``: CUDA caching allocator (peak since process start).
* ``gpuprof/host_rss_mib``: resident memory of the process (without CUDA).

All scalars of one step go into one event (one ``Summary`` with several
values), which keeps the writing cost per step low.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

__all__ = ["TAGS", "TEXT_TAG", "TensorBoardWriter"]

TAGS = {
    "step_time_ms": "gpuprof/step_time_ms",
    "data_loading_share": "gpuprof/data_loading_share",
    "gpu_utilization": "gpuprof/gpu_utilization",
    "memory_allocated_mib": "gpuprof/memory_allocated_mib",
    "memory_reserved_mib": "gpuprof/memory_reserved_mib",
    "memory_peak_mib": "gpuprof/memory_peak_mib",
    "host_rss_mib": "gpuprof/host_rss_mib",
}
TEXT_TAG = "gpuprof/findings"


class TensorBoardWriter:
    """A thin layer over ``SummaryWriter`` for gpuprof's scalars and findings text."""

    def __init__(self, log_dir: str | os.PathLike[str], filename_suffix: str = "") -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        self._writer = SummaryWriter(log_dir=os.fspath(log_dir), filename_suffix=filename_suffix)
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._Summary = Summary

    @property
    def log_dir(self) -> str:
        return str(self._writer.log_dir)

    def add_step(self, step: int, values: Mapping[str, float]) -> None:
        """Write the named scalars (keys of :data:`TAGS`) of one step as one event."""
        vals = [self._Summary.Value(tag=TAGS[k], simple_value=float(v)) for k, v in values.items()]
        if vals:
            self._writer._get_file_writer().add_summary(self._Summary(value=vals), step)

    def add_text(self, markdown: str, step: int = 0, tag: str = TEXT_TAG) -> None:
        self._writer.add_text(tag, markdown, global_step=step)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> "TensorBoardWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
