"""Locating the real public traces that tests run against (``../shared/traces`` beside the repo).

Tests call :func:`shared_path`; when the folder is absent (a machine without
``../shared``) the test is skipped with a reason that names the missing path.
The skip is :class:`unittest.SkipTest`, which pytest and unittest both report
as a skip, so this module (shipped in the package) needs no test framework.
"""

from __future__ import annotations

import os
import unittest
from pathlib import Path

__all__ = ["TRACES", "SNAPSHOTS", "shared_path", "shared_snapshot", "v100_samples"]

_REPO = Path(__file__).resolve().parents[2]
TRACES = Path(os.environ.get("GPUPROF_SHARED_TRACES", _REPO / ".." / "shared" / "traces")).resolve()


SNAPSHOTS = Path(os.environ.get("GPUPROF_SHARED_SNAPSHOTS", TRACES.parent / "snapshots")).resolve()


def shared_snapshot(name: str) -> Path:
    """A real CUDA memory snapshot of ``../shared/snapshots`` (see its SOURCES.md); skip when absent."""
    p = SNAPSHOTS / name
    if not p.exists():
        raise unittest.SkipTest(f"real snapshot not available: {p} (../shared is absent on this machine)")
    return p


def shared_path(*parts: str) -> Path:
    p = TRACES.joinpath(*parts)
    if not p.exists():
        raise unittest.SkipTest(f"real trace not available: {p} (../shared is absent on this machine)")
    return p


def v100_samples() -> list[Path]:
    """The four V100 ResNet-50 tb_plugin samples (num_workers 0 and 4, two spans each)."""
    d = shared_path("tbplugin", "samples")
    files = sorted(d.glob("*/*.pt.trace.json.gz"))
    if len(files) != 4:
        raise unittest.SkipTest(f"expected 4 V100 sample traces under {d}, found {len(files)}")
    return files
