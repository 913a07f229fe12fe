"""Where a capture writes: the run directory and per-rank file names.

Layout (the one torch-tb-profiler reads and ``gpuprof analyze DIR`` finds)::

    <logdir>/<run>/<worker>.<span>.pt.trace.json.gz        Chrome trace, one per recorded cycle
    <logdir>/<run>/<worker>.<span>.memory_snapshot.pickle  CUDA memory snapshot of that cycle
    <out>/events.out.tfevents.*                            TensorBoard scalars and findings text
    <out>/report.json, <out>/report.md                     the diagnosis

``<worker>`` is ``rank<R>`` under ``torchrun`` (``RANK`` set), else
``<host>_<pid>`` as ``torch.profiler.tensorboard_trace_handler`` names it.
``<out>`` is the run directory itself for a single process and
``<run>/rank<R>`` under ``torchrun``, so ranks never write the same file and
TensorBoard shows one scalar series per rank.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from gpuprof.capture.guard import GpuprofWarning

__all__ = ["RankInfo", "RunPaths", "rank_info", "default_run_name"]


@dataclass(frozen=True)
class RankInfo:
    """This process's place in a distributed job (from ``torchrun``'s variables)."""

    rank: int | None
    local_rank: int | None
    world_size: int | None
    local_world_size: int | None

    @property
    def distributed(self) -> bool:
        return self.rank is not None


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    try:
        return int(value) if value else None
    except ValueError:
        return None


def rank_info() -> RankInfo:
    """``RANK``/``LOCAL_RANK``/``WORLD_SIZE``/``LOCAL_WORLD_SIZE`` as set by ``torchrun``; without them, the
    rank and world size of the initialised default process group (ranks started by
    ``torch.multiprocessing.spawn`` or ``multiprocessing``, which set no variable), so they join one run."""
    rank = _env_int("RANK")
    local = _env_int("LOCAL_RANK")
    if rank is None and local is not None:
        rank = local
    world = _env_int("WORLD_SIZE")
    if rank is None:
        rank, world = _process_group(world)
    return RankInfo(rank, local, world, _env_int("LOCAL_WORLD_SIZE"))


def _process_group(world: int | None) -> tuple[int | None, int | None]:
    """(rank, world size) of the initialised default process group of a job of 2 or more ranks, else
    (None, ``world``); never imports torch (a process that did not import it has no process group)."""
    import sys

    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not (dist.is_available() and dist.is_initialized()):
            return None, world
        size = int(dist.get_world_size())
        return (int(dist.get_rank()), size) if size >= 2 else (None, world)
    except Exception:  # noqa: BLE001 - a process group in a strange state: as without one
        return None, world


def default_run_name(ranks: RankInfo) -> str:
    """A run name every rank of one job agrees on without talking to the others.

    ``GPUPROF_RUN`` wins; under torchrun its run id (``TORCHELASTIC_RUN_ID``,
    when it is not the default ``none``) or else the launcher's pid (the ranks
    of one node share it); otherwise the local time, to the second.
    """
    explicit = os.environ.get("GPUPROF_RUN", "").strip()
    if explicit:
        return _safe(explicit)
    if ranks.distributed:
        run_id = os.environ.get("TORCHELASTIC_RUN_ID", "").strip()
        if run_id and run_id.lower() != "none":
            return "run-" + _safe(run_id)
        return f"run-torchrun-{os.getppid()}"
    return time.strftime("run-%Y%m%d-%H%M%S")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.+" else "_" for c in name) or "run"


@dataclass(frozen=True)
class RunPaths:
    """The files of one capture (see the module docstring)."""

    logdir: Path
    run_dir: Path
    out_dir: Path
    worker: str

    @classmethod
    def make(cls, logdir: str | os.PathLike[str], run: str | None, ranks: RankInfo) -> "RunPaths":
        logdir_p = Path(logdir).expanduser()
        run_name = _safe(run) if run else default_run_name(ranks)
        run_dir = logdir_p / run_name
        if ranks.distributed:
            worker = f"rank{ranks.rank}"
            run_dir = _this_jobs(run_dir, _job_key())
            out_dir = run_dir / worker
        else:
            worker = f"{socket.gethostname()}_{os.getpid()}"
            run_dir = _unique(run_dir)
            out_dir = run_dir
        if run and run_dir.name != run_name:
            # a run name that exists: a new directory, never a mix of two runs' traces in one report (issue 37)
            warnings.warn(f"gpuprof: run directory {logdir_p / run_name} exists (another run's files): this run writes "
                          f"to {run_dir} instead", GpuprofWarning, stacklevel=3)
        return cls(logdir_p, run_dir, out_dir, _safe(worker))

    def create(self) -> None:
        """Make the directories (raises OSError when the logdir is unwritable)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # fail now, not at the first trace; an anonymous file (no name another user could plant a link at)
        with tempfile.TemporaryFile(dir=self.out_dir) as fh:
            fh.write(b"ok")

    def trace_file(self, span: int) -> Path:
        return self.run_dir / f"{self.worker}.{span}.pt.trace.json.gz"

    def snapshot_file(self, span: int) -> Path:
        return self.run_dir / f"{self.worker}.{span}.memory_snapshot.pickle"

    def oom_files(self, n: int) -> tuple[Path, Path]:
        """The snapshot and the verdict (``oom.md`` beside the JSON) of the run's ``n``-th out-of-memory error,
        next to its report: ``oom.pickle``/``oom.json`` first, then ``oom.2.pickle``..."""
        stem = "oom" if n == 0 else f"oom.{n + 1}"
        return self.out_dir / f"{stem}.pickle", self.out_dir / f"{stem}.json"

    @property
    def report_json(self) -> Path:
        return self.out_dir / "report.json"

    @property
    def report_md(self) -> Path:
        return self.out_dir / "report.md"


_JOB_FILE = ".gpuprof-job"  # in a multi-rank run directory: which job the ranks writing there belong to


def _job_key() -> str:
    """What the ranks of one job share and another job does not: torchrun's run id, else the launcher's pid
    with the host (the ranks of one node are its children)."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "").strip()
    if run_id and run_id.lower() != "none":
        return _safe(run_id)
    return _safe(f"{socket.gethostname()}-{os.getppid()}")


def _this_jobs(run_dir: Path, job: str) -> Path:
    """The directory the ranks of job ``job`` share: ``run_dir`` when it is new or already this job's, else
    ``run_dir-<job>``. Every rank decides alone and the same way: the first to arrive writes the job's key."""
    for cand in (run_dir, run_dir.with_name(f"{run_dir.name}-{job}")):
        marker = cand / _JOB_FILE
        try:
            # new, or holding nothing but job markers (this job's, or one being written): claim it
            if not cand.exists() or not [p for p in cand.iterdir() if not p.name.startswith(_JOB_FILE)]:
                cand.mkdir(parents=True, exist_ok=True)
                # the marker appears whole or not at all (written aside, then linked in; the link fails if another
                # rank's is there): a rank never reads a half-written key and takes another directory
                fd, tmp = tempfile.mkstemp(dir=cand, prefix=".gpuprof-job.")
                try:
                    with os.fdopen(fd, "w") as fh:
                        fh.write(job)
                    with contextlib.suppress(FileExistsError):
                        os.link(tmp, marker)
                finally:
                    os.unlink(tmp)
            if marker.is_file() and not marker.is_symlink() and marker.read_text(errors="replace")[:200] == job:
                return cand
        except OSError:
            return run_dir  # unwritable: create() says so, as before
    return run_dir.with_name(f"{run_dir.name}-{job}-{os.getpid()}")


def _unique(run_dir: Path) -> Path:
    # Two runs started in the same second, or given the same name, must not share a directory.
    if not run_dir.exists():
        return run_dir
    for i in range(2, 10_000):
        cand = run_dir.with_name(f"{run_dir.name}-{i}")
        if not cand.exists():
            return cand
    return run_dir.with_name(f"{run_dir.name}-{os.getpid()}")
