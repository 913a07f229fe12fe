"""Rank summaries in JSON reports: written by one analysis, merged by a later one.

A cluster analyses each node's ranks where the traces are
(``gpuprof analyze node3/ --format json -o node3.json``); the report carries
a ``rank_summaries`` section with every rank's
:class:`~gpuprof.distributed.summary.RankSummary` (a few KB each). Then one
``gpuprof analyze node*.json`` merges them into the cross-rank view without
moving any trace.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from gpuprof.distributed.summary import SUMMARY_VERSION, RankSummary
from gpuprof.errors import InputError
from gpuprof.limits import Limit

__all__ = ["RankSummaries", "summaries_from_report", "KIND"]

KIND = "rank_summaries"
# A node report holds a few KB to a few MB per rank. Loading its summaries costs 2-5x its size (Python lists
# of numbers; 5x with the per-collective phase lists, inst_gap) and the merge and the output more, ~13x in
# all (bench/bench_node_merge.py): a report over this size is refused before it is read, so a merge stays
# under ~2 GB instead of exhausting memory.
MAX_REPORT_BYTES = Limit("GPUPROF_MAX_NODE_REPORT_BYTES", 128 << 20, "the largest node report")


@dataclass
class RankSummaries:
    """The ``rank_summaries`` report section: the inputs of a later cross-rank merge."""

    kind = KIND
    summaries: list[RankSummary] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        # the structs themselves: msgspec encodes them straight to JSON, with no copy of every list as builtins
        return {"version": SUMMARY_VERSION, "ranks": list(self.summaries)}


def summaries_from_report(path: str | os.PathLike[str], taken: dict[int, str] | None = None) -> list[RankSummary]:
    """The rank summaries a JSON report carries; InputError (one line) when it has none or is malformed.

    ``taken``: the ranks earlier reports of the merge brought (rank -> file);
    a rank this one brings again is refused, naming both files (the same node
    report given twice, or two nodes that both claim a rank: merging either
    would compare a rank with itself). This report's ranks are added to it.

    Validated before anything is merged (see :func:`problem_in`): the
    report's ``schema_version`` (1.x) and each section's and rank's
    ``version``, then every field of every rank (finite, not negative where
    a count or duration, the per-instance lists of one length). The JSON is
    decoded straight into the summaries (msgspec, one rank at a time, from
    the file's bytes), not first into dicts: see docs/security-tests.md for
    the memory this costs.
    """
    p = Path(path)
    try:
        cap = MAX_REPORT_BYTES.value()
        with open(p, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > cap:
                raise InputError(p, MAX_REPORT_BYTES.exceeded(f"a report of {size:,} bytes"))
            buf = fh.read(cap + 1)
        if len(buf) > cap:  # grew since: not a file gpuprof wrote and left alone
            raise InputError(p, MAX_REPORT_BYTES.exceeded(f"a report of more than {cap:,} bytes"))
    except OSError as err:
        raise InputError.from_os_error(p, err, "read") from None
    try:
        head = msgspec.json.decode(buf, type=_Head)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise InputError(p, f"unreadable gpuprof report ({_json_problem(buf, err)})") from None
    except RecursionError:
        raise InputError(p, "JSON nested too deep for a gpuprof report") from None
    version = head.schema_version
    if not (isinstance(version, str) and version.split(".")[0] == _SCHEMA_MAJOR):
        raise InputError(p, f"report of schema_version {version!r}; this gpuprof reads {_SCHEMA_MAJOR}.x")
    out: list[RankSummary] = []
    found = False
    for raw in head.sections:
        try:
            kind = msgspec.json.decode(raw, type=_Kind).kind
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue  # another section's shape is not ours to judge here
        except RecursionError:
            raise InputError(p, "JSON nested too deep for a gpuprof report") from None
        if kind != KIND:
            continue
        found = True
        try:
            section = msgspec.json.decode(raw, type=_Section)
        except RecursionError:
            raise InputError(p, "JSON nested too deep for a gpuprof report") from None
        except (msgspec.DecodeError, msgspec.ValidationError) as err:
            raise InputError(p, f"malformed rank summaries section ({_json_problem(bytes(raw), err)})") from None
        if section.version != SUMMARY_VERSION:
            raise InputError(p, f"rank summaries of version {section.version!r}; this gpuprof reads {SUMMARY_VERSION}")
        out += [_one_rank(p, i, rank_raw) for i, rank_raw in enumerate(section.ranks)]
    if not found:
        raise InputError(p, "a gpuprof report without rank summaries (analyse a trace with distributedInfo, "
                            "or a gpuprof version that writes them)")
    if not out:  # gpuprof writes the section only with ranks in it: an emptied one would merge as "No findings"
        raise InputError(p, f"its {KIND!r} section lists no rank (an empty 'ranks' list): nothing to merge")
    seen: dict[int, int] = {}
    for i, s in enumerate(out):
        if s.rank is not None and s.rank in seen:
            raise InputError(p, f"rank {s.rank} twice (rank summaries {seen[s.rank]} and {i}): "
                                "each rank must be given once")
        if s.rank is not None:
            seen[s.rank] = i
    if taken is not None:
        for s in out:
            if s.rank is not None and s.rank in taken:
                raise InputError(p, f"rank {s.rank} is also in {taken[s.rank]}: the same rank twice (the same node "
                                    "report given twice?); give each rank once")
        taken.update((s.rank, os.fspath(p)) for s in out if s.rank is not None)
    return out


_SCHEMA_MAJOR = "1"


class _Head(msgspec.Struct):
    """What the merge reads of a report at first: its schema and its sections, undecoded."""

    schema_version: object = None
    sections: list[msgspec.Raw] = msgspec.field(default_factory=list)


class _Kind(msgspec.Struct):
    kind: object = None


class _Section(msgspec.Struct):
    version: object = None
    ranks: list[msgspec.Raw] = msgspec.field(default_factory=list)


class _Version(msgspec.Struct):
    version: object = None


def _one_rank(p: Path, i: int, raw: msgspec.Raw) -> RankSummary:
    try:
        version = msgspec.json.decode(raw, type=_Version).version
    except RecursionError:
        raise InputError(p, f"rank summary {i}: JSON nested too deep") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise InputError(p, f"rank summary {i}: not a JSON object ({_json_problem(bytes(raw), err)})") from None
    if version != SUMMARY_VERSION:
        raise InputError(p, f"rank summary {i} of version {version!r}; this gpuprof reads {SUMMARY_VERSION}")
    try:
        s = msgspec.json.decode(raw, type=RankSummary)
    except RecursionError:
        raise InputError(p, f"rank summary {i}: JSON nested too deep") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise InputError(p, f"rank summary {i}: {_json_problem(bytes(raw), err)}") from None
    problem = problem_in(s)
    if problem is not None:
        rank = f" (rank {s.rank})" if s.rank is not None else ""
        raise InputError(p, f"rank summary {i}{rank}: {problem}")
    return s


# fields that may be negative: a start time is on the rank's own clock; -1 is "unknown" for sizes and groups
_ANY_SIGN = {"inst_start", "path_step_start", "path_step_end", "path_seg_end"}  # path_seg_end: path_problem
_UNKNOWN_ALLOWED = {"inst_bytes", "inst_group", "inst_path_name"}


def problem_in(s: RankSummary) -> str | None:
    """What is wrong with a decoded summary (naming the field), or None.

    A summary gpuprof wrote has finite numbers, no negative count or
    duration, a rank of 0 or more, a world size of 1 or more, collective
    types gpuprof knows, steps inside the trace's steps, and per-instance
    lists (``inst_*``) of one length; a list added by a later version may be
    empty (its default) in an older one's summary.
    """
    import math

    import numpy as np

    from gpuprof.trace.collectives import COLLECTIVE_TYPES

    if s.rank is not None and s.rank < 0:
        return f"field 'rank' is {s.rank}; a rank is 0 or more"
    if s.world_size is not None and s.world_size < 1:
        return f"field 'world_size' is {s.world_size}; it is 1 or more"
    n = len(s.inst_type)
    for name in s.__struct_fields__:
        v = getattr(s, name)
        if name.startswith("inst_") and isinstance(v, list) and len(v) != n and not (v == [] and name in _DEFAULT_EMPTY):
            return f"field {name!r} has {len(v)} values, 'inst_type' {n}; the per-instance lists differ in length"
        if isinstance(v, bool) or not isinstance(v, (int, float, list)) or (isinstance(v, list) and not v):
            continue
        if isinstance(v, list) and (isinstance(v[0], bool) or not isinstance(v[0], (int, float, list))):
            continue  # flags, and lists of structs (checked below)
        try:
            arr = np.asarray(v, dtype=np.float64)  # one pass in C over a list of numbers
        except (ValueError, TypeError):
            return f"field {name!r} is not a list of numbers of one shape"
        if not np.isfinite(arr).all():
            return f"field {name!r} holds {arr[~np.isfinite(arr)].flat[0]}; numbers must be finite"
        low = -1 if name in _UNKNOWN_ALLOWED else 0
        if name not in _ANY_SIGN and name not in ("rank", "world_size") and arr.size and arr.min() < low:
            return (f"field {name!r} holds {arr.min():g}; it cannot be negative" +
                    (" (-1: unknown)" if low else ""))
        if name == "inst_type" and arr.max() >= len(COLLECTIVE_TYPES):
            return f"field 'inst_type' holds {arr.max():g}, not a collective type (0..{len(COLLECTIVE_TYPES) - 1})"
        if name == "inst_step" and s.num_steps and arr.max() >= s.num_steps:
            return f"field 'inst_step' names step {arr.max():g} of a trace of {s.num_steps} steps"
    from gpuprof.distributed.jobpath import path_problem

    problem = path_problem(s)
    if problem is not None:
        return problem
    if s.series is not None:
        from gpuprof.distributed.series import series_problem

        problem = series_problem(s.series)
        if problem is not None:
            return problem
    for c in s.collectives:
        for name in c.__struct_fields__:
            x = getattr(c, name)
            if isinstance(x, (int, float)) and not isinstance(x, bool) and (x < 0 or not math.isfinite(x)):
                return f"field 'collectives.{name}' holds {x}; it must be finite and not negative"
    return None


# per-instance lists that have a default: empty in the summaries of a version that did not write them
_DEFAULT_EMPTY = {name for name in RankSummary.__struct_fields__[len(RankSummary.__struct_fields__)
                                                                 - len(RankSummary.__struct_defaults__):]
                  if name.startswith("inst_")}


def _json_problem(buf: bytes, err: Exception) -> str:
    """msgspec's message, with the field named when it points at a byte (NaN, Infinity: not JSON)."""
    import re

    text = str(err)
    m = re.search(r"byte (\d+)", text)
    if m is None:
        return text
    pos = int(m.group(1))
    if buf[pos - 1:pos] in (b"-", b"+"):  # msgspec points past the sign of -Infinity
        pos -= 1
    token = buf[pos:pos + 9]
    key = re.findall(rb'"([A-Za-z_][A-Za-z0-9_]*)"\s*:', buf[max(0, pos - 100_000):pos])
    where = f"field {key[-1].decode()!r}, " if key else ""
    if token.lstrip(b"-+").startswith((b"NaN", b"Infinity", b"inf")):
        return f"{where}byte {pos}: {token.split(b',')[0].split(b']')[0].decode(errors='replace')} is not a number " \
               "JSON allows (numbers must be finite)"
    return f"{where}{text}"
