"""OOM forensics: the observer's snapshot and verdict from recorded facts (a real snapshot: no CUDA OOM can be
produced on CPU), and the user's out-of-memory error passing through unchanged (same object, exit code,
traceback)."""

from __future__ import annotations

import io
import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.capture.oom import OOMObserver
from gpuprof.cli import cli
from gpuprof_testing.realtraces import shared_snapshot
from gpuprof_testing.snapshots import GiB


class _Plain(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name}")


def _raw(name: str) -> dict[str, Any]:
    with open(shared_snapshot(name), "rb") as f:
        return _Plain(f).load()


def _observer(tmp_path: Path, snap: Any, stream: Any = None) -> OOMObserver:
    def files(n: int) -> tuple[Path, Path]:
        stem = "oom" if n == 0 else f"oom.{n + 1}"
        return tmp_path / f"{stem}.pickle", tmp_path / f"{stem}.json"

    def device(i: int) -> dict[str, Any]:
        return {"id": i, "name": "NVIDIA A100-SXM4-40GB", "total_memory": 40 * GiB, "free_memory": 1 * GiB}

    obs = OOMObserver(files, stream, facts=(lambda: snap, lambda: {"num_ooms": 1}, device))
    obs.active = True
    return obs


def test_the_observer_writes_snapshot_and_verdict_from_recorded_facts(tmp_path: Path) -> None:
    raw = _raw("eor_nn_snapshot.pickle")
    err = io.StringIO()
    obs = _observer(tmp_path, raw, err)
    obs._observe(0, 3 * GiB, 2 * GiB, 1 * GiB)  # what the allocator passes: device, request, allocated, free
    assert (tmp_path / "oom.pickle").is_file() and (tmp_path / "oom.json").is_file()
    assert "oom.md" in err.getvalue() and "gpuprof memory" in err.getvalue()
    v = json.loads((tmp_path / "oom.json").read_text())
    reserved = sum(s["total_size"] for s in raw["segments"])
    allocated = sum(b["size"] for s in raw["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    assert v["requested_bytes"] == 3 * GiB and v["device_free_bytes"] == 1 * GiB
    assert v["reserved_bytes"] == reserved and v["allocated_bytes"] == allocated
    cats = v["categories"]
    assert sum(x for k, x in cats.items() if k != "non_pytorch") == reserved
    assert cats["non_pytorch"] == 40 * GiB - 1 * GiB - reserved  # device used minus what PyTorch reserved
    assert v["top_holders"] and v["top_holders"][0]["bytes"] > 0
    saves = [f["saves_bytes"] for f in v["fixes"]]
    assert saves and saves == sorted(saves, reverse=True)
    assert v["memory_stats"] == {"num_ooms": 1}
    md = (tmp_path / "oom.md").read_text()
    assert "3.00 GiB" in md and "Where the memory was" in md and "Fixes ranked" in md
    # the snapshot is an OOM for `gpuprof memory` too (exit 1), with the request's size, no history needed
    res = CliRunner().invoke(cli, ["memory", str(tmp_path / "oom.pickle"), "--format", "json"])
    assert res.exit_code == 1
    rep = json.loads(res.output)
    assert any(f["code"] == "GP512" and f["evidence"][0]["value"] == 3 * GiB for f in rep["findings"])
    # a second OOM in the same run does not overwrite the first
    obs._observe(0, 1 * GiB, 2 * GiB, 1 * GiB)
    assert (tmp_path / "oom.2.pickle").is_file() and (tmp_path / "oom.2.json").is_file()


def test_a_failing_observer_says_one_line_and_never_raises(tmp_path: Path) -> None:
    def boom() -> Any:
        raise RuntimeError("snapshot unavailable")

    err = io.StringIO()
    obs = _observer(tmp_path, None, err)
    obs._facts = (boom, dict, lambda i: {})
    obs._observe(0, 1, 2, 3)  # must not raise: the user's OOM is what propagates
    assert err.getvalue().count("\n") == 1 and "could not dump" in err.getvalue()


SCRIPT = """
import sys, torch, gpuprof
from torch import nn
model = nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
def train():
    for i in range(6):
        loss = model(torch.randn(4, 8)).sum()
        loss.backward(); opt.step(); opt.zero_grad()
        if i == 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        yield
if sys.argv[1] == "profiled":
    with gpuprof.profile(sys.argv[2], print_report=False, tensorboard=False) as prof:
        for _ in train():
            prof.step()
else:
    for _ in train():
        pass
"""


@pytest.mark.slow
def test_the_users_oom_passes_through_with_its_exit_code_and_traceback(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)

    plain = run("plain")
    profiled = run("profiled", str(tmp_path / "runs"))
    assert plain.returncode == profiled.returncode == 1

    def last_lines(err: str) -> list[str]:
        tb = err[err.rindex("Traceback (most recent call last)"):].splitlines()
        return [ln for ln in tb if not ln.startswith("gpuprof")][-3:]

    # the user's frames and message end the traceback, exactly as without gpuprof
    assert last_lines(plain.stderr) == last_lines(profiled.stderr)
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" in profiled.stderr


def test_the_owner_registry_finds_the_optimizer_the_loop_steps() -> None:
    torch = pytest.importorskip("torch")
    from gpuprof.capture.owners import OwnerRegistry

    model = torch.nn.Linear(4, 4)
    opt = torch.optim.Adam(model.parameters())
    reg = OwnerRegistry([model])
    assert reg.install()
    try:
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
    finally:
        reg.uninstall()
    assert opt in set(reg._optimizers)
    assert reg.owners() == []  # CPU tensors: only CUDA storages are in a CUDA snapshot
    opt.step()  # after uninstall the hook is gone: nothing new is tracked
    assert len(reg._optimizers) == 1


def test_the_capture_report_gets_memory_sections_of_its_snapshots(tmp_path: Path) -> None:
    """The last window's snapshot and the OOM dump become `memory` sections (categories summing to reserved);
    the dump's GP512 joins the findings."""
    from gpuprof.capture.oom import memory_sections

    raw = _raw("eor_nn_snapshot.pickle")
    _observer(tmp_path, raw)._observe(0, 3 * GiB, 2 * GiB, 1 * GiB)
    window = str(shared_snapshot("cs336_silmont_fwd_bf16_128.pickle"))
    files = [str(tmp_path / "oom.json"), str(tmp_path / "oom.pickle")]
    sections, findings = memory_sections([window], files)
    assert [s.source for s in sections] == [window, str(tmp_path / "oom.pickle")]
    for s in sections:
        for dev in s.to_dict()["devices"]:
            cats = dev["categories"]
            assert sum(v for k, v in cats.items() if k != "non_pytorch") == dev["reserved_bytes"]
    assert [f.code for f in findings] == ["GP512"] and findings[0].evidence[0].value == 3 * GiB
    assert memory_sections([], []) == ([], [])


def test_the_out_of_memory_message_gives_the_request_and_free_bytes() -> None:
    from gpuprof.capture.oom import oom_message_facts

    text = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.14 GiB of which "
            "1.05 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB memory in use.")
    assert oom_message_facts(text) == {"requested_bytes": 2 << 30, "device": 0,
                                       "device_free_bytes": int(1.05 * (1 << 30))}
    assert oom_message_facts("CUDA out of memory. Tried to allocate 20.00 MiB") == {"requested_bytes": 20 << 20}
    assert oom_message_facts("something else") == {}


def test_the_verdict_is_no_trace_and_the_oom_snapshot_is_a_snapshot() -> None:
    from gpuprof.tbplugin.runs import _kind
    from gpuprof.trace.source import is_trace_name

    assert not is_trace_name("oom.json") and not is_trace_name("oom.2.json")
    assert is_trace_name("boom.json") and is_trace_name("room.2.json")  # only gpuprof's own names are skipped
    assert _kind("oom.pickle") == "snapshot" and _kind("oom.3.pickle") == "snapshot"
    assert _kind("oom.json") is None and _kind("zoom.pickle") is None
