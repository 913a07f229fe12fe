"""The host-memory census (gpuprof.capture.checks.memory.hostleak) reads the user's source to name the line that keeps
a loss with its graph, and names the holder from dictionaries: a source it cannot parse (binary, nested past the
parser's depth, too large) gives no line and no exception; a holder name that is not an identifier (set through
setattr with escapes) is never named."""

from __future__ import annotations

from pathlib import Path

import gpuprof.capture.checks.memory.hostleak as hostleak
from gpuprof.capture.checks.memory.hostleak import Census, _statement


def test_unparsable_sources_give_no_line(tmp_path: Path) -> None:
    binary = tmp_path / "binary.py"
    binary.write_bytes(b"\xff\xfe\x00total += loss\x00" * 100)
    deep = tmp_path / "deep.py"
    deep.write_text("total += " + "(" * 5000 + "1" + ")" * 5000 + "\n")
    big = tmp_path / "big.py"
    big.write_text("total += loss\n" + "#" * (hostleak.MAX_SOURCE_BYTES + 1) + "\n")
    for p in (binary, deep, big):
        assert _statement(str(p), 1, "total", False, ("+=",)) is None
    ok = tmp_path / "ok.py"
    ok.write_text("x = 1\ntotal += loss\n")
    loc = _statement(str(ok), 1, "total", False, ("+=",))
    assert loc is not None and loc.line == 2  # the same reader names the line of a readable source


class _Holder:
    pass


def test_a_holder_named_with_escapes_is_not_named() -> None:
    import torch

    h = _Holder()
    name = "\x1b[31mtotal\nevil"
    model = torch.nn.Linear(2, 1)
    x = torch.randn(3, 2)
    setattr(h, name, model(x).sum())
    census = Census(0)
    for _ in range(4):
        setattr(h, name, getattr(h, name) + model(x).sum())
    r = census.finish(4)
    assert r.pattern == "graph_kept"  # the growth is still found
    assert r.holder is None or r.holder.isidentifier() or "\x1b" not in r.holder
    assert r.holder is None or "\n" not in r.holder
