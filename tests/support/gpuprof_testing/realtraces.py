"""Locating the real public data that tests and benchmarks run against.

One variable decides where they are, everywhere: ``GPUPROF_SHARED_TRACES``
names the folder that holds ``traces/`` (real profiler traces) and
``snapshots/`` (real CUDA memory snapshots). It defaults to ``../shared``
beside the repository. For compatibility it may also name the ``traces``
folder itself: a folder with a ``traces/`` subfolder is the root; a folder
without one that holds files is the traces folder (and a folder named
``traces`` has its ``snapshots`` beside it); an empty or missing folder is a
root without data (how CI hides the data for its second pass).

Tests call :func:`shared_path` (or :func:`snapshot_path`); when the data are
absent (a fresh clone with nothing beside it) the test is skipped, and every
such skip has the same one-line reason (:data:`MISSING`), so pytest's summary
shows it once. The skip is pytest's own when pytest is running, else
:class:`unittest.SkipTest` (which unittest reports as a skip), so this module
(also read by bench/ scripts) needs no test framework.
"""

from __future__ import annotations

import os
import sys
import unittest
from pathlib import Path
from typing import NoReturn

__all__ = ["ENV", "ROOT", "TRACES", "SNAPSHOTS", "MISSING", "available", "locate", "shared_path", "snapshot_path",
           "v100_samples", "shared_snapshot"]

ENV = "GPUPROF_SHARED_TRACES"
_REPO = Path(__file__).resolve().parents[3]


def locate(value: str | os.PathLike[str] | None) -> tuple[Path, Path, Path]:
    """``(root, traces, snapshots)`` for a value of ``GPUPROF_SHARED_TRACES`` (None or empty: ``../shared``)."""
    p = Path(value).expanduser() if value else _REPO.parent / "shared"
    p = p.resolve()
    if (p / "traces").is_dir() or not value or not p.is_dir() or not any(p.iterdir()):
        return p, p / "traces", p / "snapshots"
    # the older form: the traces folder itself
    root = p.parent if p.name == "traces" else p
    return root, p, root / "snapshots"


ROOT, TRACES, SNAPSHOTS = locate(os.environ.get(ENV))

MISSING = (f"real data absent: {TRACES} does not exist (set {ENV} to the folder holding traces/ and "
           "snapshots/; default ../shared beside the repository)")


def available() -> bool:
    """True when the real traces folder exists."""
    return TRACES.is_dir()


def _skip(reason: str) -> NoReturn:
    pytest = sys.modules.get("pytest")
    if pytest is not None:  # pytest's own skip: its summary then shows this line once for every such test
        pytest.skip(reason)
    raise unittest.SkipTest(reason)


def _find(base: Path, parts: tuple[str, ...]) -> Path:
    p = base.joinpath(*parts)
    if p.exists():
        return p
    if not base.is_dir():
        _skip(MISSING if base == TRACES else f"real data absent: {base} does not exist (set {ENV}; default ../shared)")
    _skip(f"real data incomplete: {p} is not in {base}")




def shared_path(*parts: str) -> Path:
    """A file or folder under the real traces (``<root>/traces/...``), or skip the test."""
    return _find(TRACES, parts)


def snapshot_path(*parts: str) -> Path:
    """A file under the real memory snapshots (``<root>/snapshots/...``), or skip the test."""
    return _find(SNAPSHOTS, parts)


def v100_samples() -> list[Path]:
    """The four V100 ResNet-50 tb_plugin samples (num_workers 0 and 4, two spans each)."""
    d = shared_path("tbplugin", "samples")
    files = sorted(d.glob("*/*.pt.trace.json.gz"))
    if len(files) != 4:
        _skip(f"real data incomplete: expected 4 V100 sample traces under {d}, found {len(files)}")
    return files


def shared_snapshot(name: str) -> Path:
    """A real CUDA memory snapshot of ``<root>/snapshots`` (see its SOURCES.md), or skip the test."""
    return snapshot_path(name)
