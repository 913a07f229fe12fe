"""torch 2.13's unescaped quotes in event names: repaired on a decode error, and only then.

torch 2.13's ``export_chrome_trace`` writes names as they are, between quotes
(see gpuprof.trace.namerepair). The broken inputs here are a real torch 2.13
CPU trace from ``../shared`` with some Python frame names replaced by what
torch writes for names that hold quotes: the first three are the exact text
seen in exports (Dynamo's lazy imports inside a recorded window). The
expected load is the same trace with those names written as JSON should.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

import gpuprof.trace.chunks as C
import gpuprof.trace.decode as D
from gpuprof.errors import InputError
from gpuprof.trace.load import load_trace
from gpuprof.trace.namerepair import repair_names, repair_note
from gpuprof_testing.realtraces import shared_path

from .test_load import CPU_ONLY, LIBKINETO, LIST_FORMAT, SAMPLE_NW0, _raw, signature

REPO = Path(__file__).resolve().parents[2]
TORCH_213_CPU = ("tbplugin", "generated_cpu_torch2.13", "tiny_cpu_nw0", "cpuworker.1795297193849114643.pt.trace.json.gz")
BAD_NAMES = [
    'sympy/tensor/tensor.py(0): ""',
    'torch/profiler/_cupti_monitor.py(0): "none"',
    'torch/_export/passes/_node_metadata_hook.py(0):         """',
    'gen.py(3): f({"a": 1}, {})',  # a "}, {" inside the name: a chunk boundary that is not one
    'C:\\tmp\\x.py(1): a\tb"',  # what torch 2.13 does not write, but a writer that escapes nothing would
]
_PY_NAME = re.compile(rb'("cat": "python_function",\n    "name": ")([^"\n]*)(",\n)')


def _variants(text: bytes, every: int) -> tuple[bytes, bytes, list[str]]:
    """(broken, intended, names): every ``every``-th Python frame name becomes one of BAD_NAMES in turn,
    written raw (as torch 2.13 does) in ``broken`` and as JSON in ``intended``."""
    broken: list[bytes] = []
    intended: list[bytes] = []
    names: list[str] = []
    done = 0
    for k, m in enumerate(_PY_NAME.finditer(text)):
        if k % every != every // 2:
            continue
        name = BAD_NAMES[len(names) % len(BAD_NAMES)]
        names.append(name)
        before = text[done : m.start(2)]
        broken += (before, name.encode())
        intended += (before, json.dumps(name).encode()[1:-1])
        done = m.end(2)
    broken.append(text[done:])
    intended.append(text[done:])
    return b"".join(broken), b"".join(intended), names


@pytest.fixture(scope="module")
def real_text() -> bytes:
    text = _raw(shared_path(*TORCH_213_CPU))
    assert len(_PY_NAME.findall(text)) > 1000  # Kineto's layout, as the repair expects it
    return text


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def test_broken_input_really_is_invalid_json(real_text: bytes) -> None:
    broken, intended, names = _variants(real_text, 300)
    assert len(names) == 5
    with pytest.raises(json.JSONDecodeError):
        json.loads(broken)
    assert sum(e.get("name") in names for e in json.loads(intended)["traceEvents"]) == 5


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_whole_file_loads_with_the_names_torch_meant(tmp_path: Path, real_text: bytes, suffix: str) -> None:
    broken, intended, names = _variants(real_text, 300)
    assert len(broken) < C.BLOCK  # one read: the whole-file path
    got = load_trace(_write(tmp_path / f"broken{suffix}", broken))
    want = load_trace(_write(tmp_path / f"intended{suffix}", intended))
    assert signature(got) == signature(want)
    assert got.load_notes == [repair_note(5)] + want.load_notes
    assert repair_note(5) == "5 event names with unescaped quotes (a torch 2.13 export bug) repaired"
    assert sorted(n for n in (e.name for e in got.python) if n in names) == sorted(names)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
@pytest.mark.parametrize("block", [1000, 1717, 4096, 9001, 65536])
def test_chunked_loads_the_same_wherever_the_chunks_are_cut(tmp_path: Path, real_text: bytes, suffix: str,
                                                            block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    broken, intended, names = _variants(real_text, 61)  # 24 names, at many places relative to the chunks
    want = signature(load_trace(_write(tmp_path / f"intended{suffix}", intended)))
    monkeypatch.setattr(C, "BLOCK", block)
    got = load_trace(_write(tmp_path / f"broken{suffix}", broken))
    assert signature(got) == want
    assert got.load_notes[0] == repair_note(len(names))


def test_a_boundary_inside_a_broken_name_is_not_taken(tmp_path: Path, real_text: bytes,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # When a read ends just after the "}, {" of 'f({"a": 1}, {})', the last boundary the chunker
    # sees is inside that name: the cut is refused (and an earlier one taken), whether the text
    # before it decodes or not. Reads of these sizes end there for some of the 5 such names.
    broken, intended, _ = _variants(real_text, 61)
    p = _write(tmp_path / "broken.json", broken)
    want = signature(load_trace(_write(tmp_path / "intended.json", intended)))
    refused: list[bool] = []
    check = D.cut_in_name

    def spy(buf: bytearray, lo: int, end: int) -> bool:
        refused.append(check(buf, lo, end))
        if refused[-1]:
            line = bytes(buf[buf.rfind(b"\n", lo, end) + 1 : end])
            assert line.lstrip().startswith(b'"name": "gen.py(3): f({"a": 1}'), line
        return refused[-1]

    monkeypatch.setattr(D, "cut_in_name", spy)
    for block in range(1000, 1012):
        monkeypatch.setattr(C, "BLOCK", block)
        assert signature(load_trace(p)) == want
    assert any(refused)
    assert refused.count(True) < len(refused) / 20  # only there


def test_cli_report_shows_the_note(tmp_path: Path, real_text: bytes) -> None:
    broken, _, names = _variants(real_text, 300)
    p = _write(tmp_path / "broken.json", broken)
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(p), "--format", "json"],
                       capture_output=True, env=env, timeout=120)
    assert r.returncode in (0, 1), r.stderr
    assert repair_note(len(names)) in json.loads(r.stdout)["traces"][0]["notes"]
    r = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(p)], capture_output=True, env=env,
                       timeout=120)
    assert r.returncode in (0, 1), r.stderr
    assert "unescaped quotes (a torch 2.13 export bug) repaired" in r.stdout.decode()


# --------------------------------------------------------------------------- what is not repaired


def _msgspec_error(text: bytes) -> str:
    """The one-line error the loader gave before the repair existed (positions are in the file's text)."""
    with pytest.raises(msgspec.DecodeError) as ei:
        msgspec.json.decode(text)
    return f"not valid JSON ({ei.value})"


def _other_breakage(text: bytes) -> dict[str, bytes]:
    broken, _, _ = _variants(text, 61)
    mid = broken.index(b'"ph"', len(broken) // 2)
    comma = broken.index(b'"pid": 11835,', broken.index(b'sympy/tensor/tensor.py(0): ""')) + len(b'"pid": 11835')
    return {
        # an unescaped name outside Kineto's layout (one line per event): not this shape
        "compact": b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a"b", "ts": 1, "dur": 1, "pid": 1, '
                   b'"tid": 1}]}',
        # Kineto's layout, but the name line is not after the event's "ph" or "cat" line
        "not after cat": text.replace(b'"cat": "python_function",\n    "name": "gen_trace.py(18): <module>",',
                                      b'"cat": "python_function",\n    "pid": 1,\n    "name": "gen_trace.py(18): "x"",',
                                      1),
        # a real syntax error that is not in a name
        "stray byte": text[:mid] + b"@" + text[mid + 1 :],
        # broken names too, but also a stray byte just after the first: the repair does not make it decode
        "names and a stray byte": broken[:comma] + b"@" + broken[comma + 1 :],
        # a name line that ends the event (no "," after it): not Kineto's shape
        "no comma": text.replace(b'"name": "gen_trace.py(18): <module>",\n    "pid": 11835,',
                                 b'"name": "gen_trace.py(18): "x""\n    "pid": 11835,', 1),
    }


@pytest.mark.parametrize("case", ["compact", "not after cat", "stray byte", "names and a stray byte", "no comma"])
@pytest.mark.parametrize("block", [C.BLOCK, 4096])
def test_other_broken_files_fail_with_the_same_one_line_error(tmp_path: Path, real_text: bytes, case: str,
                                                              block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _other_breakage(real_text)[case]
    assert data != real_text
    want = _msgspec_error(data)
    p = _write(tmp_path / "bad.json", data)
    monkeypatch.setattr(C, "BLOCK", block)
    with pytest.raises(InputError) as ei:
        load_trace(p)
    assert ei.value.problem == want
    assert "\n" not in str(ei.value)


def test_other_broken_file_exits_2_in_one_line(tmp_path: Path, real_text: bytes) -> None:
    p = _write(tmp_path / "bad.json", _other_breakage(real_text)["names and a stray byte"])
    r = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(p)], capture_output=True,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)
    err = r.stderr.decode().strip()
    assert r.returncode == 2, err
    assert err.count("\n") == 0 and str(p) in err and "not valid JSON" in err


def test_well_formed_names_are_never_touched() -> None:
    ok = b'[{\n  "ph": "X",\n  "cat": "cpu_op",\n  "name": "a\\"b",\n  "ts": 1\n}]'
    assert repair_names(ok) is None
    bad = ok.replace(b'"a\\"b"', b'"a"b"')
    fixed = repair_names(bad)
    assert fixed is not None and fixed[1] == 1
    assert msgspec.json.decode(fixed[0])[0]["name"] == 'a"b'


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
@pytest.mark.parametrize("parts", [TORCH_213_CPU, SAMPLE_NW0, LIST_FORMAT, CPU_ONLY, LIBKINETO], ids=lambda p: p[-1])
def test_valid_files_never_run_the_repair(parts: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    p = shared_path(*parts)
    ref = signature(load_trace(p))

    def fail(*args: object) -> None:
        raise AssertionError("the repair ran on a valid file")

    check = D.cut_in_name

    def never_a_name(buf: bytearray, lo: int, end: int) -> bool:
        assert not check(buf, lo, end), "a real boundary taken for one inside a name"
        return False

    monkeypatch.setattr(D, "repair_names", fail)
    monkeypatch.setattr(D, "cut_in_name", never_a_name)
    for block in (C.BLOCK, 4096):
        monkeypatch.setattr(C, "BLOCK", block)
        assert signature(load_trace(p)) == ref


@pytest.mark.parametrize("block", [C.BLOCK, 1717, 4096])
def test_annotated_trace_carries_the_names_repaired(tmp_path: Path, real_text: bytes, block: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # `analyze --annotate` reads the trace again, through the same chunking: it writes it back
    # with the names repaired (valid JSON), where it used to fail on the loader's repaired input
    from gpuprof.render.annotate import annotate_trace

    broken, intended, names = _variants(real_text, 61)
    monkeypatch.setattr(C, "BLOCK", block)
    out = {}
    for which, data in (("broken", broken), ("intended", intended)):
        out[which] = tmp_path / f"{which}.annotated.json"
        annotate_trace(_write(tmp_path / f"{which}.json", data), [], out[which])
    got = json.loads(out["broken"].read_bytes())
    assert got == json.loads(out["intended"].read_bytes())
    assert sum(e.get("name") in names for e in got["traceEvents"]) == len(names)
