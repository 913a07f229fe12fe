"""Results in the experiment trackers a team already uses: Weights & Biases and MLflow (docs/trackers.md).

One :class:`Tracker` per service, each in a module of its own (:mod:`gpuprof.trackers.wandb`,
:mod:`gpuprof.trackers.mlflow`) that imports its package only when a report is sent, so gpuprof needs
neither package installed. What is sent is built once from the report's JSON document
(:mod:`gpuprof.trackers.payload`), the same for every tracker; :mod:`gpuprof.trackers.send` sends it and
turns every failure into one line, with secrets masked (:mod:`gpuprof.redact`).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING, Iterable, Protocol

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.trackers.payload import Publication

__all__ = ["TRACKERS", "Tracker", "TrackerUnavailable", "TrackerTimeout", "active_runs", "load_tracker", "missing_package",
           "parse_targets"]

# name given to --to / to= -> (the Python package it needs, the name shown, the gpuprof module that speaks to it)
TRACKERS: dict[str, tuple[str, str, str]] = {"wandb": ("wandb", "W&B", "gpuprof.trackers.wandb"),
                                             "mlflow": ("mlflow", "MLflow", "gpuprof.trackers.mlflow")}


class TrackerUnavailable(RuntimeError):
    """The tracker's package is not installed (one line saying what to install)."""


class TrackerTimeout(RuntimeError):
    """The tracker's server did not answer within gpuprof's bound (one line saying which and how long)."""


class Tracker(Protocol):
    """One experiment tracker: sends a :class:`~gpuprof.trackers.payload.Publication` to its run."""

    label: str  # the name shown: "W&B", "MLflow"

    def publish(self, pub: Publication) -> str:
        """Send ``pub`` into the active run (or a run of its own); return where it went, for one line."""
        ...


def parse_targets(values: Iterable[str] | str | None) -> tuple[str, ...]:
    """``("wandb", "mlflow,wandb")`` or ``"wandb,mlflow"`` -> ``("wandb", "mlflow")``: known names, each once.

    ValueError (one line) for an unknown one.
    """
    if values is None:
        return ()
    items = [values] if isinstance(values, str) else list(values)
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"tracker names are strings ({', '.join(TRACKERS)}), got {type(item).__name__}")
        for word in item.split(","):
            name = word.strip().lower()
            if not name:
                continue
            if name not in TRACKERS:
                raise ValueError(f"unknown tracker {word.strip()!r} (known: {', '.join(TRACKERS)})")
            if name not in out:
                out.append(name)
    return tuple(out)


def missing_package(name: str) -> str | None:
    """One line naming what to install when ``name``'s package is missing, else None (nothing is imported)."""
    package, label, _ = TRACKERS[name]
    try:
        found = importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a broken install, or a module without a spec: as good as missing
        found = False
    if found:
        return None
    return f"sending results to {label} needs the {package} package: pip install {_pip_name(package)}"


def _pip_name(package: str) -> str:
    # mlflow-skinny is the client alone (no server, no UI): all gpuprof needs; the full mlflow works too
    return "mlflow-skinny" if package == "mlflow" else package


def load_tracker(name: str) -> Tracker:
    """The tracker called ``name``, its package imported now; :class:`TrackerUnavailable` when it is missing."""
    line = missing_package(name)
    if line is not None:
        raise TrackerUnavailable(line)
    module = importlib.import_module(TRACKERS[name][2])
    tracker: Tracker = module.make()
    return tracker


def active_runs(targets: Iterable[str]) -> dict[str, str]:
    """The id of the MLflow run active now, when MLflow is one of ``targets`` and already imported (it is
    never imported here): a capture remembers it at its start, so that a run the script ended before the
    capture did (``with mlflow.start_run():`` around the loop under ``gpuprof run``, the Hugging Face
    ``Trainer``'s MLflow callback) still receives the results. Never raises."""
    out: dict[str, str] = {}
    mlflow = sys.modules.get("mlflow") if "mlflow" in targets else None
    if mlflow is not None:
        try:
            run = mlflow.active_run()
        except Exception:  # noqa: BLE001 - a half-imported or broken MLflow: nothing remembered, sent as usual
            run = None
        run_id = getattr(getattr(run, "info", None), "run_id", None)
        if isinstance(run_id, str) and run_id:
            out["mlflow"] = run_id
    return out
