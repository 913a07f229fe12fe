"""The end-of-run report sent to the experiment trackers of ``gpuprof.profile(to=...)`` (docs/trackers.md).

Runs on the driving thread when the capture stops, after report.json/report.md are written (MLflow keeps
its active run per thread, and the user's ``wandb.init``/``mlflow.start_run`` run is the one to log into).
Only rank 0 sends (one run in the tracker per job, as the cross-rank report is rank 0's); each tracker's
outcome is one line: printed with the summary when it went, one warning when it did not. Nothing here
raises: training has ended, and the user's exit status is theirs.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TextIO

from gpuprof.capture.guard import Guard
from gpuprof.capture.run import RunFacts
from gpuprof.render.safe import visible
from gpuprof.report import Report

__all__ = ["send_to_trackers"]


def send_to_trackers(facts: RunFacts, report: Report, doc: dict[str, object] | None, g: Guard,
                     stream: TextIO | None) -> None:
    """Send the final report (``doc``: its JSON form) to ``facts.config.to``; a failure is one warning each."""
    targets = tuple(facts.config.to)
    if not targets or (facts.rank or 0) != 0 or doc is None:
        return
    from gpuprof.trackers.payload import Artefact
    from gpuprof.trackers.send import send

    run_name = Path(facts.run_dir).name if facts.run_dir else "gpuprof"
    artefacts = [Artefact(p, "report") for p in (facts.report_md, facts.report_json) if p is not None]
    artefacts += [Artefact(str(t.path), "trace") for t in facts.traces]
    with tempfile.TemporaryDirectory(prefix="gpuprof-to-") as tmp:
        html = g.run("HTML page for the trackers", "the trackers get no HTML page", _write_html, report, tmp)
        if html is not None:
            artefacts.append(Artefact(html, "html"))
        for sent in send(doc, targets, run_name, artefacts, runs=facts.config.tracker_runs):
            if not sent.ok:  # the run's files are written: they can still be sent later, from the command line
                later = f" (later: gpuprof analyze {visible(facts.run_dir)} --to {sent.tracker})" if facts.run_dir else ""
                g.warn_once(f"tracker {sent.tracker}",
                            f"gpuprof: {sent.line.rstrip('.')}{later}. Training continues.")
            elif stream is not None and facts.config.print_report:
                print(f"gpuprof: {sent.line}", file=stream, flush=True)


def _write_html(report: Report, folder: str) -> str:
    from gpuprof.htmlpage.page import report_page

    path = os.path.join(folder, "report.html")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(report_page(report))
    return path
