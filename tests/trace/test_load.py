"""The streaming trace loader: real files, every dialect, bad input, and the chunked path.

Real traces come from ``../shared/traces`` (``GPUPROF_SHARED_TRACES``) (see its SOURCES.md files); tests
that need them skip with a reason when the folder is absent.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path

import pytest

import gpuprof.trace.chunks as C
import gpuprof.trace.source as S
from gpuprof.errors import InputError
from gpuprof.trace.load import load_trace
from gpuprof.trace.model import Trace
from gpuprof.trace.source import find_traces
from gpuprof.trace.vocab import step_number
from gpuprof_testing import TraceBuilder, simple_training
from gpuprof_testing.realtraces import MISSING, TRACES, shared_path

SAMPLE_NW0 = ("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143566756.pt.trace.json.gz")
LIST_FORMAT = ("tbplugin", "historical_2020-12_list_format", "resnet50_num_workers_0", "worker0.pt.trace.json.gz")
AUTOGRAD_2021 = ("tbplugin", "historical_2021-01", "resnet50_autograd_api_num_workers_0", "worker0.pt.trace.json.gz")
PROFILER_2021 = ("tbplugin", "historical_2021-01", "resnet50_profiler_api_num_workers_0", "worker0.pt.trace.json.gz")
HTA = ("hta", "HolisticTraceAnalysis", "tests", "data")
NS_FLOAT = HTA + ("ns_resolution_trace", "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
AMD_MI250 = HTA + ("amd_trace", "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
CPU_ONLY = HTA + ("cpu_only", "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
SAMPLED_NO_PROPS = HTA + ("timeline_analysis", "sampled_rank-0.json.gz")
CHAKRA_ET = HTA + ("execution_trace", "benchmark_simple_add_et.json.gz")
MEMORY_TIMELINE = HTA + ("memory_analysis", "memory_timeline.raw.gz")
TIMESFORMER = ("hta", "TraceLens", "tests", "traces", "h100", "facebook_timesformer-base-finetuned-k400__1016002.json.gz")
LIBKINETO = ("tbplugin", "synthetic_libkineto", "before_fix_trace.json")

# Files under shared/traces that are JSON but not Chrome traces (their SOURCES.md says so).
NOT_TRACES = {"benchmark_simple_add_et.json.gz"} | {
    p.name for p in (TRACES / "tbplugin" / "plugin_outputs").glob("*.json")
}


def _all_json_files() -> list[Path]:
    if not TRACES.exists():
        return []
    return sorted(p for p in TRACES.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))


def signature(t: Trace) -> tuple:
    """Counts per kind and a checksum of every kept event: equal signatures = same load."""
    h = hashlib.sha256()
    counts = {}
    for kind, events in t.lists().items():
        counts[kind.name] = len(events)
        for e in events:
            h.update(f"{kind}|{e.name}|{e.ts!r}|{e.dur!r}|{e.pid}|{e.tid}|{e.ext}|{e.corr}|{e.nbytes}\n".encode())
    meta = (t.num_events, t.rank, t.world_size, t.base_time_ns, t.with_stack, t.profile_memory,
            tuple((d.id, d.name, d.compute_capability) for d in t.devices),
            tuple(sorted(map(str, t.thread_names.items()))), tuple(sorted(map(str, t.process_labels.items()))))
    return counts, h.hexdigest(), meta


def _raw(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _one_line(err: InputError, path: Path) -> None:
    msg = str(err)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: ") and len(msg) > len(str(path)) + 5


# --------------------------------------------------------------------------- every real file


@pytest.mark.parametrize("path", _all_json_files() or [pytest.param(None, marks=pytest.mark.skip(reason=MISSING))],
                         ids=lambda p: str(p.relative_to(TRACES)) if p else "none")
def test_every_shared_file_loads_or_is_rejected_in_one_line(path: Path) -> None:
    if path.name in NOT_TRACES:
        with pytest.raises(InputError) as ei:
            load_trace(path)
        _one_line(ei.value, path)
        assert "not a PyTorch profiler trace" in ei.value.problem
        return
    t = load_trace(path)
    assert t.num_events > 0 and t.kept_events > 0
    assert t.kept_events <= t.num_events
    assert t.file_bytes == path.stat().st_size and t.json_bytes >= t.file_bytes * (path.suffix != ".gz")
    for events in t.lists().values():
        assert all(a.ts <= b.ts for a, b in zip(events, events[1:]))  # sorted by time
        assert all(e.dur >= 0 for e in events)


def test_memory_timeline_raw_file_is_not_a_trace() -> None:
    p = shared_path(*MEMORY_TIMELINE)
    with pytest.raises(InputError) as ei:
        load_trace(p)
    _one_line(ei.value, p)
    assert "a JSON list, but not of trace events" in ei.value.problem


def test_chakra_execution_trace_is_not_a_trace() -> None:
    p = shared_path(*CHAKRA_ET)
    with pytest.raises(InputError, match='no "traceEvents" array'):
        load_trace(p)


# --------------------------------------------------------------------------- dialects


def test_modern_v100_sample_matches_its_sources_notes() -> None:
    t = load_trace(shared_path(*SAMPLE_NW0))
    assert t.num_events == 75718 and len(t.kernels) == 8772  # tbplugin/SOURCES.md / hta/SOURCES.md
    assert len(t.devices) == 4 and t.devices[0].name == "Tesla V100-DGXS-32GB"
    assert t.devices[0].compute_capability == (7, 0) and t.devices[0].num_sms == 80
    steps = sorted({step_number(e.name) for e in t.ops if step_number(e.name) is not None})
    assert steps == [16, 17, 18, 19, 20, 21]  # 2021 dialect: ProfilerStep#N is an Operator
    htod = [m for m in t.memcpys if m.extra.direction == "HtoD" and m.nbytes == 19267584]
    assert htod and all(m.extra.host_memory == "pageable" for m in htod)
    assert all(isinstance(e.tid, str) for e in t.kernels)  # "stream 7"
    assert all(k.ext >= 0 for k in t.kernels)  # lower-case "external id" is read


def test_list_format_2020() -> None:
    p = shared_path(*LIST_FORMAT)
    assert _raw(p).lstrip()[:1] == b"["
    t = load_trace(p)
    assert t.devices == [] and len(t.kernels) == 9538 and t.num_events == 82276


def test_2021_categories_without_device_properties_or_steps() -> None:
    t = load_trace(shared_path(*AUTOGRAD_2021))
    assert t.devices == []
    assert not any(step_number(e.name) is not None for e in t.ops + t.annotations)
    assert len(t.kernels) == 9329 and len(t.memcpys) > 300  # the 322 DtoD copies
    assert all(isinstance(e.tid, str) for e in t.ops)
    t2 = load_trace(shared_path(*PROFILER_2021))
    assert t2.devices == [] and any(step_number(e.name) is not None for e in t2.ops)


def test_rocm_hip_names_and_amd_device() -> None:
    t = load_trace(shared_path(*AMD_MI250))
    assert any(r.name.startswith("hip") for r in t.runtime)
    assert t.devices and all(d.vendor == "amd" and d.compute_capability is None for d in t.devices)
    assert t.kernels


def test_ns_float_timestamps_keep_their_fraction() -> None:
    t = load_trace(shared_path(*NS_FLOAT))
    assert t.kernels[1].ts == 1712195495505772.8  # float µs with a sub-µs part, as written
    assert sum(e.ts != int(e.ts) for e in t.kernels) > len(t.kernels) // 10
    assert (t.rank, t.world_size) == (0, 1) and t.base_time_ns is None


def test_cpu_only_and_sampled_traces() -> None:
    t = load_trace(shared_path(*CPU_ONLY))
    assert not t.has_gpu_activity and t.devices == [] and (t.rank, t.world_size) == (34, 300)
    s = load_trace(shared_path(*SAMPLED_NO_PROPS))
    assert s.devices == [] and s.kernels and (s.rank, s.world_size) == (0, 128)


def test_extra_top_level_keys_before_and_after_trace_events() -> None:
    p = shared_path(*TIMESFORMER)
    keys = list(json.loads(_raw(p)))
    assert keys[0] == "metadata" and keys.index("traceEvents") < keys.index("deviceProperties")
    t = load_trace(p)
    # deviceProperties and baseTimeNanoseconds come after traceEvents in this file
    assert t.devices and t.devices[0].name == "NVIDIA H100 80GB HBM3" and t.base_time_ns == 1751410836000000000
    assert t.with_stack and t.python


def test_libkineto_2026_schema() -> None:
    t = load_trace(shared_path(*LIBKINETO))
    assert t.gpu_syncs and t.kernels and len(t.devices) == 8


# --------------------------------------------------------------------------- the chunked path


def _load_with_block(path: Path, block: int, monkeypatch: pytest.MonkeyPatch) -> tuple:
    monkeypatch.setattr(C, "BLOCK", block)
    try:
        return signature(load_trace(path))
    finally:
        monkeypatch.undo()


CHUNK_FILES = [SAMPLE_NW0, LIST_FORMAT, NS_FLOAT, TIMESFORMER, AMD_MI250, CPU_ONLY, LIBKINETO]


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
@pytest.mark.parametrize("parts", CHUNK_FILES, ids=lambda p: p[-1])
@pytest.mark.parametrize("block", [4096, 1000])
def test_tiny_blocks_load_exactly_the_same_events(parts: tuple, block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    p = shared_path(*parts)
    ref = signature(load_trace(p))
    got = _load_with_block(p, block, monkeypatch)
    assert got == ref


@pytest.fixture(scope="module")
def compact_sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple]:
    """The V100 sample re-dumped as one line (no whitespace at all), and the original's signature."""
    src = shared_path(*SAMPLE_NW0)
    compact = tmp_path_factory.mktemp("compact") / "compact.json"
    compact.write_bytes(json.dumps(json.loads(_raw(src)), separators=(",", ":")).encode())
    return compact, signature(load_trace(src))


@pytest.mark.parametrize("block", [C.BLOCK, 4096, 1000])
def test_compact_one_line_json_loads_the_same(compact_sample: tuple[Path, tuple], block: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    compact, ref = compact_sample
    assert compact.read_bytes().count(b"\n") == 0
    # same events; only file sizes differ, and the signature does not include them
    assert _load_with_block(compact, block, monkeypatch) == ref


def _tricky_builder(dialect: str = "modern") -> TraceBuilder:
    """Names full of what the chunker cuts at: `}`, `,`, `{` and quotes inside strings."""
    tb = TraceBuilder(dialect=dialect)
    nasty = [
        'weird"},{"name":"fake","ph":"X"',
        "},{" * 40,  # more fake boundaries in one string than the loader tries per chunk
        '}\n,\n{ "ts": 1 }',
        "brace } comma , brace { unicode \u00e9\u4e2d \\ backslash",
    ]
    for i in range(30):
        with tb.step():
            with tb.op(nasty[i % len(nasty)] + f"#{i}", input_types=["float", '"},{"']):
                tb.kernel('k"},{"ph":"X"}' + "}," * i, us=20)
            with tb.annotate(nasty[(i + 1) % len(nasty)]):
                tb.cpu(us=5)
    return tb


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("block", [64, 1000, 4096])
def test_boundaries_inside_strings(tmp_path: Path, block: int, compact: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    tb = _tricky_builder()
    p = tb.write(tmp_path / "tricky.json", compact=compact)
    text = p.read_bytes()
    assert text.count(b"},{") > 100 and b'\\"},{\\"' in text
    ref = signature(load_trace(p))
    assert ref[0]["KERNEL"] == 30 and ref[0]["CPU_OP"] == 30 + 30 * 1  # named op + one cpu() per step
    truth = json.loads(text)["traceEvents"]
    names = {e["name"] for e in truth if e.get("cat") == "cpu_op"}
    t = load_trace(p)
    assert {e.name for e in t.ops} == names
    assert _load_with_block(p, block, monkeypatch) == ref


def test_synthetic_2021_and_gzip_chunked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tb = simple_training(TraceBuilder(dialect="2021", profile_memory=True), steps=20)
    p = tb.write(tmp_path / "old.pt.trace.json.gz")
    ref = signature(load_trace(p))
    assert ref[0]["KERNEL"] > 100
    assert _load_with_block(p, 1000, monkeypatch) == ref


@pytest.mark.parametrize("where", [0.1, 0.5, 0.95])
def test_invalid_utf8_inside_a_chunk_is_one_line_naming_the_byte(tmp_path: Path, where: float,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # msgspec 0.23 reports invalid UTF-8 as a DecodeError without a position: the loader must still say what it is
    # (not try every earlier cut, not call it malformed JSON), wherever the chunk boundaries fall
    text = simple_training(TraceBuilder(), steps=10).write(tmp_path / "ok.json").read_bytes()
    at = text.index(b'"name": "', int(len(text) * where)) + len(b'"name": "')
    bad = tmp_path / "bad.json"
    bad.write_bytes(text[:at] + b"\xff" + text[at:])
    monkeypatch.setattr(C, "BLOCK", 4096)
    with pytest.raises(InputError) as err:
        load_trace(bad)
    assert "not valid UTF-8" in str(err.value) and "0xff" in str(err.value)


def test_progress_reports_reach_the_file_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = simple_training(TraceBuilder(), steps=10).write(tmp_path / "p.json")
    monkeypatch.setattr(C, "BLOCK", 4096)
    seen: list[tuple[int, int]] = []
    load_trace(p, progress=lambda done, total: seen.append((done, total)))
    size = p.stat().st_size
    assert len(seen) > 3 and seen[-1] == (size, size)
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))


# --------------------------------------------------------------------------- bad input


def _expect_input_error(path: Path, *fragments: str) -> InputError:
    with pytest.raises(InputError) as ei:
        load_trace(path)
    _one_line(ei.value, path)
    for f in fragments:
        assert f in ei.value.problem, ei.value.problem
    return ei.value


def test_missing_file_and_directories(tmp_path: Path) -> None:
    _expect_input_error(tmp_path / "nope.json", "no such file")
    with pytest.raises(InputError, match="no such file or directory"):
        find_traces(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hi")
    with pytest.raises(InputError, match="no trace files") as ei:
        find_traces(tmp_path / "empty")
    assert "\n" not in str(ei.value)
    _expect_input_error(tmp_path / "empty", "is a directory")


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"", "empty file"),
        (b" \n\t \r\n", "empty file"),
        (b'{"a": 1}', 'no "traceEvents" array'),
        (b"[1, 2]", "a JSON list, but not of trace events"),
        (b"42", "not a PyTorch profiler trace"),
        (b"null", "not a PyTorch profiler trace"),
        (b'"traceEvents"', "not a PyTorch profiler trace"),
        (b'{"traceEvents": "abc"}', "$.traceEvents"),
        (b'{"traceEvents": []}', "no events"),
        (b"[]", "no events"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "abc", "dur": 1}]}', "$.traceEvents[0].ts"),
        (b'{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "args": [1, 2]}]}', "$.traceEvents[0].args"),
        (b'{"traceEvents": [[1]]}', "$.traceEvents[0]"),
        (b'{"deviceProperties": 7, "traceEvents": [{"ph": "X", "ts": 1}]}', "$.deviceProperties"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1e999}]}', "out of range"),
        (b'{"traceEvents": [{"ph": "X", "name": "a\xff", "ts": 1}]}', "not valid UTF-8"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1},, {"ph": "X", "ts": 2}]}', "not valid JSON"),
        (bytes(range(256)), "not a PyTorch profiler trace"),
        ("{}".encode("utf-16"), "not a PyTorch profiler trace"),
    ],
)
def test_bad_content(tmp_path: Path, content: bytes, fragment: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    _expect_input_error(p, fragment)
    g = tmp_path / "bad.json.gz"  # the same text inside gzip says the same
    g.write_bytes(gzip.compress(content))
    _expect_input_error(g, fragment)


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_truncated_real_trace_at_many_offsets(tmp_path: Path) -> None:
    data = _raw(shared_path(*SAMPLE_NW0))
    for off in (1, 2, 50, 3000, 70_000, len(data) // 3, len(data) // 2 + 7, len(data) - 2):
        p = tmp_path / f"cut{off}.json"
        p.write_bytes(data[:off])
        err = _expect_input_error(p)
        if data[:off].strip():
            assert "truncated JSON" in err.problem
        else:
            assert "empty file" in err.problem
        gz = tmp_path / f"cut{off}.json.gz"  # a complete gzip stream of truncated JSON
        gz.write_bytes(gzip.compress(data[:off], compresslevel=1))
        _expect_input_error(gz)


def test_corrupt_and_truncated_gzip(tmp_path: Path) -> None:
    good = shared_path(*CPU_ONLY).read_bytes()
    assert good[:2] == b"\x1f\x8b"
    trunc = tmp_path / "t.json.gz"
    trunc.write_bytes(good[: len(good) // 2])
    _expect_input_error(trunc, "truncated gzip")
    only_magic = tmp_path / "m.json.gz"
    only_magic.write_bytes(b"\x1f\x8b")
    _expect_input_error(only_magic, "gzip")
    header_end = good.index(b"\0", 10) + 1 if good[3] & 0x08 else 10  # skip the stored file name
    for pos in (header_end + 8, len(good) // 2, len(good) - 6):  # deflate data, then the CRC trailer
        b = bytearray(good)
        b[pos] ^= 0xFF
        b[pos + 1] ^= 0x5A
        p = tmp_path / f"flip{pos}.json.gz"
        p.write_bytes(bytes(b))
        _expect_input_error(p)


@pytest.mark.slow  # writes and loads several large broken files (about 2 s)
def test_errors_mid_file_are_reported_at_once_with_their_position(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    data = _raw(shared_path(*SAMPLE_NW0))
    m = re.compile(rb'"ts": (\d+)').search(data, len(data) // 2)
    typed = data[: m.start()] + b'"ts": "abc"' + data[m.end():]
    truth = next(i for i, e in enumerate(json.loads(typed)["traceEvents"]) if isinstance(e.get("ts"), str))
    p = tmp_path / "typed.json"
    p.write_bytes(typed)
    at = data.index(b'"ph"', len(data) // 3)
    q = tmp_path / "syntax.json"
    q.write_bytes(data[:at] + b"@" + data[at + 1:])
    for block in (C.BLOCK, 1 << 20, 4096):
        monkeypatch.setattr(C, "BLOCK", block)
        _expect_input_error(p, f"$.traceEvents[{truth}].ts")
        _expect_input_error(q, "not valid JSON", f"(byte {at})")
        # reported at the bad event: far less text is read than the file holds
        reads: list[int] = []
        load = S.Source.read

        def counting(self: S.Source, n: int) -> bytes:  # patched and undone within this iteration
            out = load(self, n)  # noqa: B023 - this iteration's load, called before the loop moves on
            reads.append(len(out))  # noqa: B023 - likewise
            return out

        monkeypatch.setattr(S.Source, "read", counting)
        with pytest.raises(InputError):
            load_trace(q)
        assert sum(reads) < at + 2 * block + 1024
        monkeypatch.undo()
