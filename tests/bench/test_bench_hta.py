"""bench/bench_hta.py without HTA: its 'HTA missing' exit, its child runner's stops, staging and lower bounds."""

from __future__ import annotations

import gzip
import importlib.util
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from gpuprof_testing.realtraces import shared_path

REPO = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    if "bench_hta" in sys.modules:
        return sys.modules["bench_hta"]
    spec = importlib.util.spec_from_file_location("bench_hta", REPO / "bench" / "bench_hta.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_hta"] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod


def _has_hta(python: str) -> bool:
    return subprocess.run([python, "-c", "import hta"], capture_output=True).returncode == 0


def test_without_hta_it_says_so_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    assert bench.main([]) == 0
    assert "no --hta-python given" in capsys.readouterr().out
    assert bench.main(["--hta-python", str(tmp_path / "no-python")]) == 0
    assert "no-python" in capsys.readouterr().out
    if _has_hta(sys.executable):
        pytest.skip("this interpreter has HTA: the 'cannot import' case cannot be shown with it")
    assert bench.main(["--hta-python", sys.executable]) == 0
    out = capsys.readouterr().out
    assert "cannot import hta.trace_analysis" in out and "nothing to compare" in out


def test_a_child_past_its_timeout_is_killed_with_its_children_and_its_cpu_kept(tmp_path: Path) -> None:
    """Behaviour only, no clock: a busy machine may give the spin any share of a CPU. The child writes the
    CPU it has used so far (a lower bound of what it used up to the kill); the run must keep at least that.
    The grandchild writes a file when its sleep ends: run_child returning before that means it did not wait
    for the grandchild (which holds the same pipes) to end on its own."""
    bench = _bench()
    pidfile, cpufile, woke = tmp_path / "grandchild", tmp_path / "cpu", tmp_path / "woke"
    sleeper = "import sys, time; time.sleep(60); open(sys.argv[1], 'w')"
    code = ("import os, subprocess, sys, time\n"
            f"p = subprocess.Popen([sys.executable, '-c', {sleeper!r}, sys.argv[3]])\n"
            "open(sys.argv[1], 'w').write(str(p.pid))\n"
            "fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT)\n"
            "last = 0.0\n"
            "while True:\n"
            "    t = time.process_time()\n"
            "    if t - last > 0.005:  # fixed width, one pwrite: never a half-written number\n"
            "        os.pwrite(fd, b'%020.6f' % t, 0)\n"
            "        last = t\n")
    run = bench.run_child([sys.executable, "-c", code, str(pidfile), str(cpufile), str(woke)], timeout_s=1.0,
                          poll_s=0.05)
    assert run.stderr == "" and not woke.exists()  # it returned without waiting for the grandchild's sleep
    assert run.stopped == "timeout after 1 s"
    assert run.exit == -9
    used = float(cpufile.read_text()) if cpufile.exists() and cpufile.stat().st_size else 0.0
    assert used > 0 and run.cpu_s >= used  # the killed child's CPU is counted, at least what it had reported
    grandchild = int(pidfile.read_text())
    for _ in range(50):  # killed with its group; gone or a zombie awaiting its new parent
        try:
            state = Path(f"/proc/{grandchild}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"grandchild {grandchild} still running")
    assert not woke.exists()  # killed, not ended by itself


def test_a_child_past_the_memory_cap_is_killed() -> None:
    bench = _bench()
    code = "import time\nb = bytearray(300_000_000)\nb[::4096] = b'x' * len(b[::4096])\ntime.sleep(30)\n"
    run = bench.run_child([sys.executable, "-c", code], max_rss=100_000_000, poll_s=0.05)
    assert run.stopped == "killed at 0.1 GB RSS" and run.exit == -9
    assert run.peak_rss > 100_000_000


def test_a_child_that_ends_is_measured_not_stopped() -> None:
    bench = _bench()
    run = bench.run_child([sys.executable, "-c", "import sys; print('x', file=sys.stderr); sys.exit(3)"], timeout_s=60)
    assert run.stopped == "" and run.exit == 3 and run.stderr == "x"
    assert run.wall_s > 0 and run.peak_rss > 1_000_000


def test_staging_decompresses_gz_and_links_json_in_a_folder_of_one(tmp_path: Path) -> None:
    bench = _bench()
    text = b'{"traceEvents": []}'
    gz = tmp_path / "a.json.gz"
    gz.write_bytes(gzip.compress(text))
    (tmp_path / "s1").mkdir()
    trace, folder = bench.stage(gz, tmp_path / "s1")
    assert trace.read_bytes() == text and os.listdir(folder) == ["a.json"] and trace.parent == folder
    plain = tmp_path / "b.json"
    plain.write_bytes(text)
    (tmp_path / "s2").mkdir()
    trace, folder = bench.stage(plain, tmp_path / "s2")
    assert trace == plain  # gpuprof reads the file itself; HTA reads the same bytes through its folder
    (entry,) = os.listdir(folder)
    st = os.lstat(folder / entry)
    assert entry == "b.json" and (st.st_ino == plain.stat().st_ino or stat.S_ISLNK(st.st_mode))
    odd = tmp_path / "trace.txt"  # HTA lists *.json and *.gz only: the link gets a .json name
    odd.write_bytes(text)
    (tmp_path / "s3").mkdir()
    trace, folder = bench.stage(odd, tmp_path / "s3")
    assert os.listdir(folder) == ["trace.txt.json"] and trace == folder / "trace.txt.json"


def test_ratios_are_paired_and_a_stopped_hta_is_a_lower_bound() -> None:
    bench = _bench()
    R = bench.Run

    def rnd(g: float, h: float, stopped: str = "") -> dict:
        return {"gpuprof": R(g, g, 1, 0), "HTA": R(h, h, 1, -9 if stopped else 0, stopped)}

    s = bench.summarize([rnd(1.0, 12.0), rnd(2.0, 20.0), rnd(1.0, 11.0)])
    assert s["ratio_cpu_s"] == [11.0, 10.0, 12.0]  # per round, not median over median (20/1.0 would be 20)
    assert s["hta_lower_bound"] is False and bench.verdict(s) == "met"
    s = bench.summarize([rnd(1.0, 5.0)])
    assert bench.verdict(s) == "not met"
    s = bench.summarize([rnd(1.0, 5.0, "timeout after 5 s"), {"gpuprof": R(1.0, 1.0, 1, 0)}])
    assert s["hta_lower_bound"] and s["gpuprof"]["n"] == 2 and s["HTA"]["n"] == 1
    assert bench.verdict(s).startswith("unknown")
    s = bench.summarize([rnd(1.0, 50.0, "timeout after 50 s")])
    assert bench.verdict(s) == "met"  # a lower bound above the target is enough


def test_a_hung_hta_is_stopped_once_and_nothing_is_left_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole per-file loop with a stand-in for HTA that never ends: gpuprof runs every round, HTA once."""
    src = shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "critical_path", "cuda_event_sync",
                      "event_sync_trace.json.gz")
    bench = _bench()
    hung = tmp_path / "hung-python"
    hung.write_text("#!/bin/sh\nexec sleep 60\n")
    hung.chmod(0o755)
    monkeypatch.setattr(bench.tempfile, "tempdir", str(tmp_path))
    res = bench.bench_file(src, str(hung), 2, 0.5, None, floor=False)
    assert [sorted(r) for r in res["rounds"]] == [["HTA", "gpuprof"], ["gpuprof"]]
    assert res["rounds"][0]["HTA"]["stopped"] == "timeout after 0.5 s"
    assert res["hta_lower_bound"] and res["gpuprof"]["n"] == 2
    assert res["bytes"] == len(gzip.decompress(src.read_bytes()))  # the decompressed file both tools read
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hung-python"]  # the staging folder is gone
