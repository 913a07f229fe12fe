"""What a framework's callback tells a capture that torchrun's variables and the user's own loop would.

Lightning's DDP launchers and ``mp.spawn`` know the rank but set no ``RANK``;
Lightning and ``transformers.Trainer`` build and iterate the DataLoaders
themselves. :mod:`gpuprof.integrations` passes what the trainer knows through
these three methods, which :class:`gpuprof.capture.session.Profiler` inherits
(kept here so that the session module stays the step clock and its rules).
"""

from __future__ import annotations

from typing import TypeVar

from gpuprof.capture.checks import Live, LoaderCheck
from gpuprof.capture.guard import Guard
from gpuprof.capture.paths import RankInfo
from gpuprof.findings import SourceLocation

__all__ = ["FrameworkSeams"]

_S = TypeVar("_S", bound="FrameworkSeams")


class FrameworkSeams:
    started: bool
    live: Live
    guard: Guard

    def place(self: _S, rank: int, world_size: int, *, local_rank: int | None = None,
              local_world_size: int | None = None) -> _S:
        """This process's place in a distributed job, for launchers that do not set torchrun's variables.

        Call before :meth:`start`: the rank names this process's files
        (``rank<R>/``) and rank 0 writes the cross-rank report. A
        ``world_size`` of 1 is a single process (no per-rank layout).
        """
        if self.started:
            raise RuntimeError("Profiler.place() must be called before start()")
        if world_size > 1:
            self.live.ranks = RankInfo(rank, local_rank, world_size, local_world_size)
        else:
            self.live.ranks = RankInfo(None, None, None, None)
        return self

    def watch_loader(self: _S, loader: object, location: SourceLocation | None = None, label: str | None = None) -> _S:
        """A DataLoader a framework built and iterates (Lightning, ``transformers.Trainer``).

        Its batches are counted as any loader's; its findings point at
        ``location`` (the user's line that configured it) rather than the
        framework's line that iterates it, and read ``label`` when given.
        Call before or during the capture.
        """
        check = self.live.find(LoaderCheck)
        if check is not None:
            check.monitor.adopt(loader, location, label)
        return self

    def mark_eval(self) -> None:
        """The step in progress (until the next ``step()``) includes an evaluation: the job's timeline
        shows it as an ``eval`` phase rather than a slowdown (Lightning's and Hugging Face's callbacks call it)."""
        from gpuprof.capture.checks.watch import WatchCheck

        watch = self.live.find(WatchCheck)
        if watch is not None:
            watch.mark_eval(self.live)

    def note(self, text: str) -> None:
        """Add one line to the report's notes (e.g. how a framework's steps map to gpuprof's)."""
        self.guard.note(text)
