"""Regenerate the sample trace that the README's first command analyses.

    python examples/sample_trace/generate.py

Runs ``examples/dataloader_workers.py`` (its pathology: ``num_workers=0``) on the CPU
under gpuprof's own capture, into a temporary log directory, and copies the Chrome
trace it wrote here. Only the trace is kept: the TensorBoard events and reports are
re-created by anyone who runs the example.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "dataloader_workers.py"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, str(EXAMPLE), "--device", "cpu", "--steps", "20", "--logdir", tmp, "--run-name", "sample"],
            check=True,
        )
        traces = sorted(Path(tmp).rglob("*.pt.trace.json.gz"))
        if not traces:
            raise SystemExit("the example wrote no trace")
        for old in HERE.glob("*.pt.trace.json.gz"):
            old.unlink()
        for t in traces:
            shutil.copy2(t, HERE / t.name)
            print(f"wrote {HERE / t.name} ({t.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
