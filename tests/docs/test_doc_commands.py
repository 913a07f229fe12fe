"""Every documented command runs: the fenced ```` ```bash doctest ```` blocks of README.md and docs/*.md.

The convention (README, "Documented commands"; docs/contributing.md):

* A fenced block whose info string is exactly ``bash doctest`` holds commands CI runs. Each line is one
  command (a line ending in ``\\`` continues on the next; lines starting with ``#`` are comments). It
  runs with ``bash -c`` in a fresh temporary copy of the repository (README.md, pyproject.toml, docs/,
  examples/, gpuprof/) as the working directory, so files it writes land there and a later line of the
  same block can read them; ``gpuprof`` is ``python3 -m gpuprof`` of this checkout, ``python3``/``python``
  the interpreter running the tests, ``torchrun`` its ``torch.distributed.run``. ``pip install`` runs as
  ``pip install --dry-run --no-index --no-build-isolation``: it must resolve against what is installed,
  and changes nothing.
* It must exit 0, unless the line ends with a comment ``# exit N`` (``gpuprof analyze ... # exit 1``:
  findings at or above ``--fail-on``).
* ``../shared`` in a block is the real data (``GPUPROF_SHARED_TRACES``, the folder holding ``traces/``
  and ``snapshots/``); without them the block is skipped with the one reason of every real-data skip.
* Every other shell block (```` ```bash ````, ``sh``, ``shell``, ``console``) is a command CI cannot run
  (a GPU, a URL, a server that runs until stopped, the suite itself): it must be listed in
  :data:`NOT_RUN` below with the reason. A new unmarked command, or a listed one that is gone, fails
  :func:`test_every_shell_block_is_run_or_listed_with_a_reason`. Blocks of output, file trees and usage
  synopses are ```` ```text ````; a fence without an info string fails too (say what it is).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuprof_testing import realtraces

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN = "bash doctest"
SHELLS = {"bash", "sh", "shell", "console", "zsh"}
# what a block's working directory holds: a copy, so what a command writes never touches the checkout
COPIED = ("README.md", "pyproject.toml", "LICENSE", "CHANGELOG.md", "docs", "examples", "gpuprof")
# a capture in a training example (~10-30 s): a script, a launcher, or a test suite under the pytest plugin
SLOW = re.compile(r"\btorchrun\b|\bpython3? examples/|\bgpuprof run\b|\bpython3? -m pytest\b.* examples/")
EXIT = re.compile(r"\s#\s*exit\s+(\d+)\b")
TIMEOUT_S = 180

# Shell blocks CI does not run, keyed by (page, first command line), each with the reason.
NOT_RUN: dict[tuple[str, str], str] = {
    ("docs/try.md", "gpuprof try --steps 20 --warmup 3 examples/plain_train.py --device cpu --steps 200"):
        "seven trials of a training job (a few minutes on 2 cores), and its exit code (0: a variant faster, 1: none) "
        "depends on the machine: tests/trials/test_try_jobs.py runs gpuprof try on a planted job and checks what it "
        "writes",
    ("README.md", 'python3 -m pip install -q torch==2.13.0 -e ".[test,lint,tensorboard,frameworks,dask]" && python3 -m ruff check gpuprof tests bench && python3 -m mypy gpuprof && python3 -m pytest -q -p no:cacheprovider -m "not slow"'):
        "the fast test suite, of which this test is a part: .ci/run runs it (tests/test_lint_config.py keeps the two the same)",
    ("README.md", 'pip install "gpuprof[capture] @ git+https://github.com/OWNER/gpuprof"'):
        "installs from a URL: needs the network and the published repository",
    ("README.md", "python3 examples/lightning_train.py --device cpu --steps 12 --logdir gpuprof_logs --run-name lightning"):
        "both framework examples run in tests/integrations/test_examples.py with these options (a minute each on "
        "2 cores: run once, there, to keep the suite under its time budget)",
    ("docs/integrations.md", "python examples/lightning_train.py --logdir gpuprof_logs --run-name lit"):
        "the Lightning example, single process and DDP on 2 CPU processes: tests/integrations/test_examples.py runs "
        "both (the DDP one with GPUPROF_TEST_DDP=1: 45 s on 2 cores)",
    ("docs/integrations.md", "python examples/hf_trainer.py --logdir gpuprof_logs --run-name hf"):
        "the HF Trainer example and its torchrun form: tests/integrations/test_examples.py and test_transformers.py",
    ("docs/integrations.md", "gpuprof analyze accelerate_traces/"):
        "needs the traces accelerate's ProfileKwargs wrote in the loop above: tests/integrations/test_accelerate.py "
        "runs the loop and this analysis",
    ("README.md", "tensorboard --logdir gpuprof_logs"):
        "starts a server that runs until stopped (tests/tbplugin test the gpuprof tab)",
    ("docs/contributing.md", "./.ci/run"):
        "CI itself: installs packages (apt-get, pip) and runs the whole suite",
    ("docs/memory.md", "apt-get update && apt-get install -y chromium"):
        "installs a system package (root, network)",
    ("docs/tensorboard.md", 'python3 -m pip install -e ".[tensorboard]"     # tensorboard>=2.21 (and torch-tb-profiler, optional view)'):
        "then starts a TensorBoard server that runs until stopped (the install alone runs in README.md's Install)",
    ("docs/distributed.md", 'gpuprof analyze "s3://bucket/run-42/*/rank*.pt.trace.json.gz" --dask tcp://scheduler:8786 --format json -o job.json'):
        "object storage and a Dask scheduler of the user's (tests/test_remote.py and tests/distributed/test_dask_cluster.py "
        "run the same paths on fsspec's memory:// and file:// and a LocalCluster)",
    ("docs/distributed.md", "gpuprof analyze /scratch/run/ --format json -o node$NODE.json"):
        "a cluster's nodes: the paths and $NODE are the user's (the same commands run on the example above it)",
}


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    line: int  # of the opening fence, 1-based
    info: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def commands(self) -> list[tuple[int, str, int]]:
        """(line, command, expected exit code) for each command, ``\\`` continuations joined."""
        out: list[tuple[int, str, int]] = []
        pending: list[str] = []
        start = 0
        for i, raw in enumerate(self.text.splitlines(), self.line + 1):
            line = raw.rstrip()
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if not pending:
                start = i
            if line.endswith("\\"):
                pending.append(line[:-1].rstrip())
                continue
            pending.append(line.strip() if len(pending) else line)
            cmd = " ".join(p.strip() for p in pending)
            pending = []
            m = EXIT.search(cmd)
            out.append((start, cmd, int(m.group(1)) if m else 0))
        assert not pending, f"{self.id}: the last command ends in a backslash"
        return out


def _blocks(page: Path) -> list[Block]:
    """The fenced blocks of a markdown page (CommonMark fences: ``` or ~~~, three or more, up to 3 spaces in)."""
    rel = str(page.relative_to(REPO))
    blocks: list[Block] = []
    fence: str | None = None
    info = ""
    start = 0
    body: list[str] = []
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        m = re.match(r"^ {0,3}(`{3,}|~{3,})(.*)$", line)
        if fence is None:
            if m:
                fence, info, start, body = m.group(1), m.group(2).strip(), n, []
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
            blocks.append(Block(rel, start, info, "\n".join(body)))
            fence = None
        else:
            body.append(line)
    assert fence is None, f"{rel}:{start}: a fence that is never closed"
    return blocks


ALL = [b for p in PAGES for b in _blocks(p)]
RUNNABLE = [b for b in ALL if b.info == RUN]


def _key(b: Block) -> tuple[str, str]:
    cmds = b.commands()
    return b.page, cmds[0][1] if cmds else ""


def test_the_pages_have_blocks_to_run() -> None:
    assert any(b.page == "README.md" for b in RUNNABLE), "the README runs nothing"
    assert len(RUNNABLE) >= 8, [b.id for b in RUNNABLE]
    # the README's first set-up command (install, then the sample's report) is one of them
    first = next(b for b in ALL if b.page == "README.md" and b.info in SHELLS | {RUN})
    assert first.info == RUN and "pip install -e ." in first.text and "gpuprof analyze examples/sample_trace" in first.text


def test_slow_blocks_use_no_real_data() -> None:
    # CI's second pass (the real data hidden) leaves the slow tests out: they must not be the ones that need the data
    both = [b.id for b in RUNNABLE if SLOW.search(b.text) and "../shared" in b.text]
    assert not both, f"a block that runs a training example must not need ../shared: {both}"


def test_every_fence_says_what_it_holds() -> None:
    bare = [b.id for b in ALL if not b.info]
    assert not bare, f"fences without an info string (```text, ```python, ```bash doctest, ...): {bare}"


def test_every_shell_block_is_run_or_listed_with_a_reason() -> None:
    not_run = {_key(b): b.id for b in ALL if (b.info.split() or [""])[0] in SHELLS and b.info != RUN}
    unlisted = {k: where for k, where in not_run.items() if k not in NOT_RUN}
    assert not unlisted, ("shell blocks neither marked ```bash doctest nor listed in NOT_RUN with a reason: "
                          f"{unlisted}")
    stale = sorted(set(NOT_RUN) - set(not_run))
    assert not stale, f"NOT_RUN lists blocks the pages no longer have (or now run): {stale}"
    odd = [b.id for b in ALL if b.info.startswith("bash") and b.info not in ("bash", RUN)]
    assert not odd, f"a shell block's info string is exactly 'bash' or 'bash doctest': {odd}"


def test_commands_parse_continuations_and_exit_codes() -> None:
    b = Block("x.md", 1, RUN, "# a comment\ngpuprof analyze a \\\n   --format json  # exit 1\n\ngpuprof rules\n")
    assert b.commands() == [(3, "gpuprof analyze a --format json  # exit 1", 1), (6, "gpuprof rules", 0)]


def _bin(tmp: Path) -> Path:
    """``gpuprof``, ``python3``, ``python`` and ``torchrun`` of this interpreter and checkout."""
    d = tmp / "bin"
    d.mkdir()
    py = sys.executable
    scripts = {
        "gpuprof": f'exec "{py}" -m gpuprof "$@"',
        "python3": f'exec "{py}" "$@"',
        "python": f'exec "{py}" "$@"',
        "torchrun": f'exec "{py}" -m torch.distributed.run "$@"',
    }
    for name, body in scripts.items():
        (d / name).write_text(f"#!/bin/sh\n{body}\n")
        (d / name).chmod(0o755)
    return d


def _pip_dry(cmd: str) -> str:
    # resolve against what is installed, change nothing (no network, no build environment)
    return re.sub(r"\bpip install\b", "pip install --dry-run --no-index --no-build-isolation", cmd)


def _workspace(tmp: Path) -> Path:
    work = tmp / "repo"
    work.mkdir()
    for name in COPIED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, work / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), symlinks=True)
        elif src.exists():
            shutil.copy2(src, work / name)
    if realtraces.available():
        (tmp / "shared").symlink_to(realtraces.ROOT, target_is_directory=True)  # ../shared from the copy
    return work


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id, marks=[pytest.mark.slow] if SLOW.search(b.text) else [])
                                   for b in RUNNABLE])
def test_documented_command_runs(block: Block, tmp_path: Path) -> None:
    if "../shared" in block.text and not realtraces.available():
        pytest.skip(realtraces.MISSING)
    work = _workspace(tmp_path)
    env = {**os.environ, "PATH": f"{_bin(tmp_path)}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(work), "COLUMNS": "100", "GPUPROF_SHARED_TRACES": str(realtraces.ROOT)}
    for line, cmd, expected in block.commands():
        proc = subprocess.run(["bash", "-c", _pip_dry(cmd)], cwd=work, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        assert proc.returncode == expected, (
            f"{block.page}:{line}: `{cmd}` exited {proc.returncode}, expected {expected}\n"
            f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}")
        assert "Traceback (most recent call last)" not in proc.stderr, f"{block.page}:{line}: {proc.stderr[-3000:]}"
