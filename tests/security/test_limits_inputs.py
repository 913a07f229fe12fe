"""Hostile inputs cost time and memory in proportion to what they describe, and fail as exit 2 in one line.

Each input runs through the real CLI in a child process under a memory cap
(RLIMIT_AS) and a timeout, so a regression shows as a failure here, not as
a machine that swaps. Before these limits, the 80 KB shared-reference pickle
below ran past 60 s at 1.4 GB, the 60-byte device-10**10 snapshot ran out of
memory, and 100k-deep JSON was exit 3.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import resource
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from gpuprof_testing.realtraces import shared_path

REPO = Path(__file__).resolve().parents[2]
CAP = 1536 * 1024 * 1024  # bytes of address space for the child: python + gpuprof need ~300 MB


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def gpuprof(*args: str, stdin: bytes | None = None, env: dict[str, str] | None = None,
            timeout: float = 60) -> tuple[int, str, str, float]:
    """The exit code, stdout, stderr and the CPU seconds (user + system) the child used: CPU, not the wall
    clock, so that a busy machine (other processes on the same cores) does not fail the bounds on it."""
    e = {**os.environ, "PYTHONPATH": str(REPO), "GPUPROF_JOBS": "1", **(env or {})}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([sys.executable, "-m", "gpuprof", *args], input=stdin, capture_output=True, env=e,
                       timeout=timeout, preexec_fn=_cap)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return p.returncode, p.stdout.decode(), p.stderr.decode(), cpu


def assert_refused(path: Path | str, rc: int, err: str, *words: str) -> None:
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # one line, no traceback
    assert str(path) in lines[0]
    for w in words:
        assert w in lines[0], lines[0]


# --------------------------------------------------------------------------- snapshots


def _dump(tmp_path: Path, name: str, obj: object) -> Path:
    p = tmp_path / name
    p.write_bytes(pickle.dumps(obj, protocol=4))
    return p


def test_tiny_snapshot_with_a_huge_device_index(tmp_path: Path) -> None:
    p = _dump(tmp_path, "dev.pickle", {"segments": [{"device": 10**10, "blocks": []}]})
    assert p.stat().st_size <= 64
    rc, _, err, cpu = gpuprof("memory", str(p))
    assert_refused(p, rc, err, "device 10000000000", "GPUPROF_MAX_DEVICE_INDEX")
    assert cpu < 30


def test_device_index_limit_can_be_raised(tmp_path: Path) -> None:
    p = _dump(tmp_path, "dev.pickle", {"segments": [{"device": 2000, "address": 0, "total_size": 2 << 20,
                                                     "blocks": [{"size": 2 << 20, "state": "inactive"}]}]})
    rc, _, err, _ = gpuprof("memory", str(p))
    assert_refused(p, rc, err, "device 2000")
    rc, out, err, _ = gpuprof("memory", str(p), "--format", "json", env={"GPUPROF_MAX_DEVICE_INDEX": "4096"})
    assert rc in (0, 1), err
    assert "cuda:2000" in out


def test_shared_reference_pickle_is_refused_fast(tmp_path: Path) -> None:
    # 20,000 references to one segment whose blocks are 20,000 references to one block:
    # 80 KB of pickle describing 400 million blocks.
    block = {"size": 512, "address": 0, "state": "active_allocated"}
    seg = {"device": 0, "address": 0, "total_size": 512, "blocks": [block] * 20000}
    p = _dump(tmp_path, "laughs.pickle", {"segments": [seg] * 20000})
    assert p.stat().st_size < 100_000
    rc, _, err, cpu = gpuprof("memory", str(p))
    assert_refused(p, rc, err, "items", "GPUPROF_MAX_SNAPSHOT_ITEMS_PER_BYTE")
    assert cpu < 30


def test_shared_frames_lists_of_real_snapshots_still_load(tmp_path: Path) -> None:
    # PyTorch shares one frames list among the entries with the same stack: that is no amplification.
    frames = [{"filename": "/home/u/train.py", "line": 3, "name": "main"}]
    entries = [{"action": a, "addr": 4096 * (i // 2), "size": 512, "time_us": i, "frames": frames}
               for i, a in enumerate(["alloc", "free_requested"] * 2000)]
    p = _dump(tmp_path, "ok.pickle", {"segments": [], "device_traces": [entries]})
    rc, out, err, _ = gpuprof("memory", str(p), "--format", "json")
    assert rc in (0, 1), err
    assert json.loads(out)["sections"]


@pytest.mark.parametrize(
    "entry, field, what",
    [
        ({"size": float("nan")}, "size", "NaN"),
        ({"size": -5}, "size", "negative"),
        ({"size": 10**30}, "size", "too large"),
        ({"size": "12"}, "size", "a str"),
        ({"size": [1, 2]}, "size", "a list"),
        ({"addr": -1}, "addr", "negative"),
        ({"time_us": float("inf")}, "time_us", "too large"),
        ({"time_us": 10**400}, "time_us", "too large"),
        ({"time_us": "noon"}, "time_us", "a str"),
    ],
)
def test_bad_numbers_in_the_history(tmp_path: Path, entry: dict, field: str, what: str) -> None:
    e = {"action": "alloc", "addr": 0, "size": 512, "time_us": 1, **entry}
    p = _dump(tmp_path, "bad.pickle", {"segments": [], "device_traces": [[e]]})
    rc, _, err, _ = gpuprof("memory", str(p))
    assert_refused(p, rc, err, f"device_traces[0][0].{field}")
    assert what.split()[-1] in err


def test_block_state_that_is_a_deeply_shared_list(tmp_path: Path) -> None:
    # str() of this would be 2**60 characters long
    x: list = []
    for _ in range(60):
        x = [x, x]
    seg = {"device": 0, "address": 0, "total_size": 512, "blocks": [{"size": 512, "state": x}]}
    p = _dump(tmp_path, "state.pickle", {"segments": [seg]})
    rc, _, err, cpu = gpuprof("memory", str(p))
    assert_refused(p, rc, err, "state", "a list")
    assert cpu < 30


def _frames_bomb(tmp_path: Path) -> Path:
    x: list = []
    for _ in range(60):
        x = [x, x]
    frames = [{"filename": x, "line": x, "name": x}, x]
    return _dump(tmp_path, "frames.pickle", {"segments": [], "device_traces": [[
        {"action": "alloc", "addr": 0, "size": 512, "time_us": 1, "frames": frames}]]})


def test_frames_that_are_deeply_shared_lists_are_not_printed(tmp_path: Path) -> None:
    p = _frames_bomb(tmp_path)
    rc, out, err, cpu = gpuprof("memory", str(p), "--format", "json")
    assert rc in (0, 1), err
    assert cpu < 30
    assert len(out) < 200_000


MALFORMED = {
    # pickle opcodes by hand: each makes the C unpickler raise a different exception
    "attribute": b"\x80\x04}\x94}\x94b.",  # BUILD on a dict -> AttributeError
    "append_to_dict": b"\x80\x04}\x94K\x01a.",  # APPEND on a dict -> AttributeError
    "setitem_on_list": b"\x80\x04]\x94K\x01K\x02s.",  # SETITEM on a list -> TypeError
    "underflow": b"\x80\x04a.",  # APPEND with an empty stack
    "bad_get": b"\x80\x04h\x05.",  # a memo key that was never put
    "truncated": pickle.dumps({"segments": [1, 2, 3]}, protocol=4)[:-4],
    "bad_utf8": b"\x80\x04\x8c\x02\xff\xfe\x94.",
    "global": b"\x80\x04\x8c\x02os\x8c\x06system\x93.",
    "garbage": b"\x80\x04\xff\xff\xff",
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_pickles_are_exit_2(tmp_path: Path, name: str) -> None:
    p = tmp_path / f"{name}.pickle"
    p.write_bytes(MALFORMED[name])
    rc, _, err, _ = gpuprof("memory", str(p))
    assert_refused(p, rc, err)


def test_snapshot_from_a_pipe(tmp_path: Path) -> None:
    entries = [{"action": "alloc", "addr": 4096 * i, "size": 1 << 20, "time_us": i} for i in range(50)]
    data = pickle.dumps({"segments": [], "device_traces": [entries]}, protocol=4)
    p = tmp_path / "s.pickle"
    p.write_bytes(data)
    rc1, from_file, err1, _ = gpuprof("memory", str(p), "--format", "json")
    rc2, from_pipe, err2, _ = gpuprof("memory", "-", "--format", "json", stdin=data)
    assert rc1 == rc2 and rc1 in (0, 1), err1 + err2
    assert from_file.replace(str(p), "-") == from_pipe


# --------------------------------------------------------------------------- traces


def test_json_nested_100k_deep_is_exit_2(tmp_path: Path) -> None:
    p = tmp_path / "deep.json"
    p.write_text('[{"ph":"X","args":{"a":' + "[" * 100_000 + "]" * 100_000 + "}}]")
    rc, _, err, _ = gpuprof("analyze", str(p))
    assert_refused(p, rc, err, "nested too deeply")


def _string_trace(path: Path, nbytes: int) -> None:
    with open(path, "w") as f:
        f.write('{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1,"pid":0,"tid":7},')
        f.write('{"ph":"X","cat":"cpu_op","name":"')
        chunk = "x" * (1 << 20)
        for _ in range(nbytes >> 20):
            f.write(chunk)
        f.write('","ts":2,"dur":1,"pid":0,"tid":1}]}')


def test_event_bigger_than_the_limit_is_refused_early(tmp_path: Path) -> None:
    p = tmp_path / "big.json"
    _string_trace(p, 64 << 20)
    rc, _, err, cpu = gpuprof("analyze", str(p), env={"GPUPROF_MAX_EVENT_BYTES": "8MiB"})
    assert_refused(p, rc, err, "larger" if "larger" in err else "event", "GPUPROF_MAX_EVENT_BYTES")
    assert "more than 9," in err or "more than 8," in err  # stopped within a block past the limit
    assert cpu < 30


@pytest.mark.slow
def test_big_event_under_the_limit_costs_linear_time(tmp_path: Path) -> None:
    # Reading on by doubling: a 48 MiB name is found in a few passes, not 48 (each over all the text).
    p = tmp_path / "big.json"
    _string_trace(p, 48 << 20)
    rc, out, err, cpu = gpuprof("analyze", str(p), "--format", "json")
    assert rc in (0, 1), err
    assert json.loads(out)["traces"][0]["num_events"] == 2
    assert cpu < 20


def _gzip_members(path: Path, head: bytes, unit: bytes, members: int) -> None:
    """head, then ``members`` gzip members of 1 MiB of ``unit`` each: tiny on disk, huge decoded."""
    one = gzip.compress(unit * ((1 << 20) // len(unit)), compresslevel=9)
    with open(path, "wb") as f:
        f.write(gzip.compress(head))
        for _ in range(members):
            f.write(one)


def test_gzip_bomb_of_whitespace(tmp_path: Path) -> None:
    p = tmp_path / "ws.json.gz"
    _gzip_members(p, b'{"traceEvents":[', b" ", 20 * 1024)  # 20 GiB of spaces
    assert p.stat().st_size < 40 << 20
    rc, _, err, cpu = gpuprof("analyze", str(p))
    assert_refused(p, rc, err)
    assert cpu < 30


@pytest.mark.slow
def test_gzip_bomb_of_tiny_events_hits_the_ratio(tmp_path: Path) -> None:
    p = tmp_path / "ev.json.gz"
    _gzip_members(p, b'{"traceEvents":[{}', b",{}", 4 * 1024)  # 4 GiB of empty events
    rc, _, err, cpu = gpuprof("analyze", str(p))
    assert_refused(p, rc, err, "GPUPROF_MAX_GZIP_RATIO")
    assert cpu < 30


# --------------------------------------------------------------------------- pipes


SMALL_TRACE = ("tbplugin", "generated_cpu_torch2.13", "tiny_cpu_nw0", "cpuworker.1795297193849114643.pt.trace.json.gz")


def _real(parts: tuple[str, ...]) -> Path:
    return shared_path(*parts)  # skips, with the one reason, without the real data


def _report(out: str) -> dict:
    r = json.loads(out)
    for t in r.get("traces", []):
        t.pop("path", None)
        t.pop("file_bytes", None)
    r.pop("inputs", None)
    return {"traces": r.get("traces"), "findings": [(f["code"], f.get("title")) for f in r.get("findings", [])]}


@pytest.mark.parametrize("how", ["dash", "dev_stdin", "fifo"])
def test_trace_from_a_pipe_streams(tmp_path: Path, how: str) -> None:
    src = _real(SMALL_TRACE)
    data = src.read_bytes()
    rc0, ref, err0, _ = gpuprof("analyze", str(src), "--format", "json")
    if how == "fifo":
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        import threading

        def write() -> None:
            with open(fifo, "wb") as f:
                f.write(data)

        t = threading.Thread(target=write, daemon=True)
        t.start()
        rc, out, err, _ = gpuprof("analyze", str(fifo), "--format", "json")
        t.join(10)
    else:
        rc, out, err, _ = gpuprof("analyze", "-" if how == "dash" else "/dev/stdin", "--format", "json", stdin=data)
    assert rc == rc0, err
    assert _report(out) == _report(ref)


def test_plain_json_through_a_pipe_with_a_bad_tail_names_stdin() -> None:
    rc, _, err, _ = gpuprof("analyze", "-", stdin=b'{"traceEvents":[{"ph":"X"},')
    assert_refused("-", rc, err, "truncated")


# --------------------------------------------------------------------------- real traces pass


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_real_traces_are_within_the_default_limits() -> None:
    from gpuprof.inputs import MAX_EVENT_BYTES, MAX_GZIP_RATIO

    files = sorted(shared_path().rglob("*.json.gz"))
    assert files, "the real traces folder holds no .json.gz"
    for f in files:
        raw = f.read_bytes()
        text = zlib.decompress(raw, 31)
        assert len(text) < MAX_GZIP_RATIO.default * len(raw) / 4, f  # a wide margin
        assert len(text) < MAX_EVENT_BYTES.default or b"}," in text, f


def test_huge_memo_index_is_refused_before_it_is_allocated(tmp_path: Path) -> None:
    # PROTO 2, EMPTY_DICT, LONG_BINPUT 0x0ffffff0, STOP: 9 bytes that make the C unpickler
    # size its memo table for 268 million entries (2-4 GB zeroed) before anything of ours runs.
    # The child may map 8 GB, so only gpuprof's own budget stops it.
    p = tmp_path / "memo.pickle"
    p.write_bytes(b"\x80\x02}r" + (0x0FFFFFF0).to_bytes(4, "little") + b".")
    code = (
        "import resource, sys\n"
        "from gpuprof.cli import main\n"
        "try:\n    main(['memory', sys.argv[1]])\n"
        "except SystemExit as e:\n    rc = e.code\n"
        # VmHWM, not ru_maxrss: ru_maxrss survives exec and holds the RSS of the forking pytest
        # process (over 1 GB late in the suite), VmHWM is this program's own peak
        "hwm = next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
        "print('maxrss_kb', hwm, 'rc', rc)\n"
    )
    e = {**os.environ, "PYTHONPATH": str(REPO)}
    big = 8 << 30
    r = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, env=e, timeout=60,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (big, big)))
    out, err = r.stdout.decode(), r.stderr.decode()
    line = out.strip().splitlines()[-1].split()
    assert line[0] == "maxrss_kb" and line[3] == "2", (out, err)
    assert int(line[1]) < 1024 * 1024, out  # far below the 2 GB the memo table would take
    assert_refused(p, 2, err, "asks for more memory")
