"""Send one report to the trackers asked for; every failure is one line, never an exception.

Used by ``gpuprof analyze --to`` and by the capture at the end of a run (``to=``). Before anything is
sent, the secrets a tracker reads from the environment (W&B's API key, MLflow's tracking password and
token, the credentials of ``MLFLOW_TRACKING_URI``) are registered with :mod:`gpuprof.redact`, so an error
message that quotes them is masked like a URL's password.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable

from gpuprof.redact import redact, remember_secret, scrub
from gpuprof.trackers import TRACKERS, TrackerTimeout, TrackerUnavailable, load_tracker
from gpuprof.trackers.payload import Artefact, Publication, publication

__all__ = ["Sent", "send", "protect_secrets"]

# environment variables whose values are credentials of a tracker (never printed)
SECRET_ENV = ("WANDB_API_KEY", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "DATABRICKS_TOKEN",
              "MLFLOW_TRACKING_CLIENT_CERT_PATH")
URL_ENV = ("MLFLOW_TRACKING_URI", "WANDB_BASE_URL", "MLFLOW_REGISTRY_URI")


@dataclass(frozen=True)
class Sent:
    """What became of one tracker: ``ok`` and one line to show (secrets masked, one line)."""

    tracker: str
    ok: bool
    line: str


def protect_secrets() -> None:
    """Register the trackers' credentials found in the environment with :mod:`gpuprof.redact`."""
    for name in SECRET_ENV:
        value = os.environ.get(name)
        if value:
            remember_secret(value)
    for name in URL_ENV:
        value = os.environ.get(name)
        if value:
            redact(value)  # remembers the URL's user:password and secret query values


def send(doc: dict[str, Any], targets: Iterable[str], run_name: str, artefacts: Iterable[Artefact] = (),
         runs: dict[str, str] | None = None) -> list[Sent]:
    """Send the report document ``doc`` to each tracker of ``targets``; one :class:`Sent` per tracker.

    ``runs``: tracker -> the run to log into when none is active by then (a capture's, from its start).
    """
    targets = list(targets)
    if not targets:
        return []
    protect_secrets()
    from gpuprof.saved.check import ReportProblem

    try:
        pub = publication(doc, run_name, artefacts)
    except ReportProblem as err:  # a value no measurement has (a NaN, a step of days): nothing sent, one line
        return [Sent(name, False, _one_line(f"results not sent to {TRACKERS[name][1]}: the report's {err.field} "
                                            f"{err.problem}")) for name in targets]
    pub.run_ids = dict(runs or {})
    return [_send_one(name, pub) for name in targets]


def _send_one(name: str, pub: Publication) -> Sent:
    label = TRACKERS[name][1]
    try:
        where = load_tracker(name).publish(pub)
    except (TrackerUnavailable, TrackerTimeout) as err:
        return Sent(name, False, _one_line(f"results not sent to {label}: {err}"))
    except Exception as err:  # noqa: BLE001 - a tracker's failure is one line; the analysis or training goes on
        text = _one_line(f"{type(err).__name__}: {_text(err)}")
        return Sent(name, False, f"results not sent to {label}: {text}")
    extra = f"; {'; '.join(pub.notes)}" if pub.notes else ""
    counts = ", ".join(_count(n, what) for n, what in ((len(pub.findings), "finding"),
                                                       (len(pub.windows), "step window"), (len(pub.artefacts), "file")))
    return Sent(name, True, _one_line(f"results sent to {label} {where}: {counts}{extra}"))


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _text(err: BaseException) -> str:
    try:
        return str(err)
    except Exception:  # noqa: BLE001 - a library's exception whose __str__ fails still gets a line
        return "(no message)"


def _one_line(text: str, limit: int = 400) -> str:
    from gpuprof.render.safe import visible

    text = visible(" ".join(scrub(text).split()))
    return text if len(text) <= limit else text[: limit - 3] + "..."
