"""Data loading: the DataLoader ranges of the training thread and the one data-loading share.

Definitions:

**Data-loading share** (:func:`data_loading_share`, the one definition every
figure uses): time the training thread spent waiting for the next batch
(inside ``DataLoader.__next__``; overlapping ranges counted once) / the step
time of the same steps, at most 1. From a trace (GP102, GP103, ``analyze``)
the steps are the recorded ones; during a capture (GP601, the summary, the
report's ``data_loading_share``, the TensorBoard scalar) every step is timed
live, so a capture reports the share over the whole run and its report drops
GP102 when GP601 holds the same finding.

**DataLoader ranges**: the ``enumerate(DataLoader)#...__next__`` ranges of
the main thread when the trace has them, else every DataLoader-named range
there. The loader is *single-process* (``num_workers=0``) when one of the
``enumerate(DataLoader)`` ranges names a single-process iterator; unknown
(None) in traces without them.
"""

from __future__ import annotations

from gpuprof.trace.model import Event
from gpuprof.trace.vocab import is_single_process_dataloader

__all__ = ["data_loading_share", "loader_ranges"]


def loader_ranges(host_dl_events: list[Event]) -> tuple[list[Event], bool | None]:
    """The DataLoader ranges among the main thread's data-loading events, and whether
    the loader is single-process (see the module docstring)."""
    dl_events = [e for e in host_dl_events if e.name.startswith("enumerate(DataLoader)")] or host_dl_events
    single: bool | None = None
    if any(e.name.startswith("enumerate(DataLoader)") for e in dl_events):
        single = any(is_single_process_dataloader(e.name) for e in dl_events)
    return dl_events, single


def data_loading_share(loading: float, step_time: float) -> float | None:
    """The data-loading share: ``loading`` (time waiting in ``DataLoader.__next__``, any unit) over
    ``step_time`` (the steps it falls in, same unit); at most 1, None without step time.

    The one definition (see the module docstring) behind ``TraceMetrics.data_loading_share``
    (GP102/GP103), the capture's GP601, its summary and report figure and its TensorBoard scalar.
    """
    if step_time <= 0:
        return None
    return min(loading / step_time, 1.0)
