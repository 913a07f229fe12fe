"""What a capture leaves behind: a plain, serialisable :class:`CaptureResult`.

``Profiler.stop()`` returns it, ``with gpuprof.profile(...) as p`` leaves it
in ``p.result`` and ``@gpuprof.profile_step`` in ``step.result`` (and returns
it from ``step.finish()``). It holds values only (no torch, no live
profiler, no open file), so it can be kept, logged, pickled or sent as JSON
(:meth:`CaptureResult.to_json` / :meth:`CaptureResult.from_json`) and read
in a process without torch.

It is built once per report from the capture's state (see
``gpuprof.capture.end``): the summary printed, ``report.json`` and the
TensorBoard text are all rendered from the same report it carries.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gpuprof.findings import Finding

__all__ = ["CaptureResult", "RecordedTrace", "WindowReport"]


class RecordedTrace(msgspec.Struct, frozen=True, kw_only=True):
    """One trace the capture wrote: its file, the loop's steps it holds, its memory snapshot (CUDA)."""

    path: str
    first_step: int  # the trace's ProfilerStep#N are the loop's step numbers
    last_step: int
    memory_snapshot: str | None = None


class WindowReport(msgspec.Struct, frozen=True, kw_only=True):
    """One report of the run: ``report`` is the ``report.json`` document (docs/report-schema.md).

    ``final`` is False for the report written when the schedule's last
    recorded window closed (while the run went on), True for the one written
    when the capture stopped, which covers the whole run.
    """

    at_step: int  # steps completed when it was written
    final: bool
    report: dict[str, Any]


class CaptureResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one capture (one process; one rank under torchrun).

    * ``run_dir``/``out_dir``: where the traces and (``out_dir``) the
      TensorBoard events and reports are; None when nothing could be written.
    * ``files``: every file the capture wrote (traces, memory snapshots,
      out-of-memory dumps, the TensorBoard event file, report.json/report.md).
    * ``steps``: ``step()`` calls (training iterations) seen;
      ``step_time_median_ms`` and ``data_loading_share`` (time waiting for the
      DataLoader / step time, over every step; see
      ``gpuprof.trace.dataloading.data_loading_share``) measure them.
    * ``reports``: the window report (if the run outlived the recorded window)
      then the final one; :attr:`report` is the last.
    * ``runtime_findings``: the GP6xx findings measured in the live process
      (also inside the reports, with the trace findings).
    * ``warnings``: every warning gpuprof gave during the capture, in order.
    * ``inactive``: why the capture recorded nothing (another profiler ran), else None.
    """

    run_dir: str | None = None
    out_dir: str | None = None
    worker: str = ""
    rank: int | None = None
    steps: int = 0
    step_time_median_ms: float | None = None
    data_loading_share: float | None = None
    traces: tuple[RecordedTrace, ...] = ()
    files: tuple[str, ...] = ()
    reports: tuple[WindowReport, ...] = ()
    runtime_findings: tuple[Finding, ...] = ()
    warnings: tuple[str, ...] = ()
    inactive: str | None = None

    @property
    def report(self) -> dict[str, Any] | None:
        """The last report written (the whole run's, once the capture stopped), as in report.json."""
        return self.reports[-1].report if self.reports else None

    def findings(self) -> list[Finding]:
        """The last report's findings (runtime and trace), most expensive first."""
        rep = self.report
        return [Finding.from_dict(d) for d in rep.get("findings", ())] if rep else []

    def _repr_html_(self) -> str:
        """The result as an inert HTML fragment, shown by Jupyter for a cell's value."""
        from gpuprof.render.notebook import fragment

        if self.inactive is not None:
            return fragment(f"capture recorded nothing: {self.inactive}", [], [], [], [])
        head = f"capture: {self.steps} steps"
        if self.step_time_median_ms is not None:
            head += f", median {self.step_time_median_ms:.2f} ms/step"
        if self.data_loading_share is not None:
            head += f", data loading {self.data_loading_share:.0%}"
        rep = self.report
        notes = [str(n) for n in rep.get("notes", [])] if rep else []
        failed = [str(r) for r in rep.get("failed_rules", [])] if rep else []
        files = [("run directory", self.run_dir)] if self.run_dir else []
        files += [("trace", t.path) for t in self.traces]
        files += [("report", f) for f in self.files if f.endswith(("report.json", "report.md"))]
        return fragment(head, self.findings() if rep else list(self.runtime_findings), failed, notes, files)

    def to_json(self) -> bytes:
        """The result as JSON (UTF-8 bytes); :meth:`from_json` reads it back equal."""
        return _ENCODER.encode(self)

    @classmethod
    def from_json(cls, data: bytes | str) -> "CaptureResult":
        """Read a result written by :meth:`to_json` (raises ``msgspec.ValidationError`` for anything else)."""
        return _DECODER.decode(data)


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(CaptureResult)
