"""The capture session's live state, read-only: the properties of :class:`~gpuprof.capture.session.Profiler`
that only read its :class:`~gpuprof.capture.checks.Live` (kept apart so the session module stays small)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.capture.checks import Live
    from gpuprof.capture.paths import RankInfo, RunPaths
    from gpuprof.findings import Finding

__all__ = ["SessionState"]


class SessionState:
    """Read-only views of the session's ``live`` state."""

    live: Live

    @property
    def ranks(self) -> RankInfo:
        return self.live.ranks

    @property
    def paths(self) -> RunPaths | None:
        return self.live.paths

    @property
    def cuda(self) -> bool:
        return self.live.cuda

    @property
    def step_num(self) -> int:
        """Steps completed so far."""
        return self.live.step_num

    @property
    def step_s(self) -> list[float]:
        """Each step's time, in seconds (a copy: the session keeps them as machine doubles)."""
        return self.live.step_s.tolist()

    @property
    def step_signatures(self) -> list[object]:
        return self.live.step_signatures

    @property
    def findings(self) -> list[Finding]:
        """Runtime findings raised outside the checks so far (device mismatch, out of memory)."""
        return self.live.findings
