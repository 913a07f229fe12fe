"""Each finding's what-if: the step time its fix would save, replayed on the step graph.

One table (:data:`ACTIONS`) says, per rule code, what removing the finding's
cause means on the graph; :func:`with_what_if` replays it
(:mod:`gpuprof.trace.critpath.replay`) and sets the finding's
``what_if_saving_us``. Where the rule's own cost and the replay differ by more
than :data:`MARGIN_SHARE` of the larger (and by more than
:data:`MARGIN_STEP_SHARE` of the mean step), ``what_if_note`` says which to
believe and why; a finding with a cost whose cause is not on the graph says it
cannot be replayed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import numpy as np

from gpuprof.findings import Finding
from gpuprof.trace.columns import columns
from gpuprof.trace.critpath.graph import WAIT_DATA, StepGraph, build_graph
from gpuprof.trace.critpath.replay import Removal, Replayer, replay_saving
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.threads import thread_keys

__all__ = ["ACTIONS", "MARGIN_SHARE", "MARGIN_STEP_SHARE", "with_what_if", "NOTE_HIDDEN", "NOTE_STARVES",
           "NOTE_NOT_REPLAYED", "NOTE_CROSS_RANK", "NOTE_OTHER_THREADS", "margin_note", "step_of", "cross_rank_not_replayed",
           "call_names"]

MARGIN_SHARE = 0.25
MARGIN_STEP_SHARE = 0.01

# The step still waits for something else: GPU work already queued (a data wait while the GPU runs the previous
# step), the transfer itself (a blocking copy made asynchronous: the kernels still need its data), work launched
# later or the host's own launching (a sync in a host-bound step). Worded to hold in each case, as the finding
# does not say which one it was.
NOTE_HIDDEN = ("the step still waits for what else sets it (GPU work already queued, the transfer itself, or the "
               "host's own work): the replay saves less than the rule's cost; believe the what-if")
NOTE_STARVES = ("starves the GPU: removing it saves more than its own time (the GPU work it held back "
                "runs earlier); believe the what-if")
NOTE_NOT_REPLAYED = "not replayed: its cause is not a node of the step graph; the rule's cost is its own estimate"
NOTE_CROSS_RANK = "not replayed: a cross-rank cause (the ranks' graphs are not joined); the rule's cost stands"
NOTE_OTHER_THREADS = ("part of these calls ran on other host threads (the autograd or a pin-memory thread): the "
                      "replay cuts only the main thread's time, as the trace does not record what the main thread "
                      "waited for on another; take the what-if as the lower bound and the rule's cost as the upper")

_Pick = Callable[[StepGraph, Replayer, Finding, TraceMetrics], Removal]


def _data(g: StepGraph, r: Replayer, f: Finding, m: TraceMetrics) -> Removal:
    return Removal(drop=frozenset(int(w) for w in r.waits if g.w_kind[w] == WAIT_DATA))


def _copies(direction: str | None, make_async: bool) -> _Pick:
    def pick(g: StepGraph, r: Replayer, f: Finding, m: TraceMetrics) -> Removal:
        ws = frozenset(int(w) for w in r.waits if g.w_kind[w] != WAIT_DATA and g.w_tag[w]
                       and (direction is None or g.w_tag[w] == direction))
        return Removal(make_async=ws) if make_async else Removal(drop=ws)
    return pick


def _syncs(g: StepGraph, r: Replayer, f: Finding, m: TraceMetrics) -> Removal:
    """The waits of the finding's site (its source line; without one, the sync points without one): each sync
    point's outermost operator (``.item()`` is a device→host copy *and* a stream sync: both go), less the waits
    of host→device copies (GP202's)."""
    spans = sorted((s.ops[0].ts, s.ops[0].end) if s.ops else (s.runtime.ts, s.runtime.end)
                   for s in m.syncs if s.location == f.location)
    if not spans:
        return Removal()
    lo = np.array([a for a, _ in spans])
    hi = np.maximum.accumulate(np.array([b for _, b in spans]))
    out = []
    for w in r.waits.tolist():
        if g.w_kind[w] == WAIT_DATA or g.w_tag[w] == "HtoD":
            continue
        i = int(np.searchsorted(lo, g.w_ts[w], side="right")) - 1
        if i >= 0 and g.w_end[w] <= hi[i] + 1e-6:
            out.append(int(w))
    return Removal(drop=frozenset(out))


def _launches(g: StepGraph, r: Replayer, f: Finding, m: TraceMetrics) -> Removal:
    return Removal(close_launch_gaps=True)


def _runtime_calls(g: StepGraph, r: Replayer, f: Finding, m: TraceMetrics) -> Removal:
    """The main thread's time in the calls the finding names (its evidence: the allocator calls of a churn
    finding, the one slow call of a long-call finding), cut out of its time line: the fix makes them cheap
    (a warm caching allocator) or moves them out of the step (created once at start-up)."""
    names = call_names(f)
    cut = Intervals.empty()
    for name, calls in g.host_runtime:
        if name in names:
            cut = cut.union(calls)
    return Removal(cut_host=cut)


def call_names(f: Finding) -> set[str]:
    """The runtime calls a GP205 finding's evidence names (``call``; the keys of ``calls_per_step``/``calls``)."""
    out: set[str] = set()
    for ev in f.evidence:
        one = ev.extra.get("call")
        if isinstance(one, str):
            out.add(one)
        for key in ("calls_per_step", "calls"):
            many = ev.extra.get(key)
            if isinstance(many, dict):
                out.update(k for k in many if isinstance(k, str))
    return out


def _elsewhere_us(g: StepGraph, f: Finding, m: TraceMetrics) -> float:
    """Per step, the time of the finding's calls inside the steps on host threads other than the main one."""
    names = call_names(f)
    if not g.steps or not names or not m.trace.runtime:
        return 0.0
    rc = columns(m.trace, m.trace.runtime)
    named = np.fromiter((n in names for n in rc.names), bool, len(rc.names))[rc.name_code]
    keys = thread_keys(m.main_thread)
    other = np.fromiter((t not in keys for t in rc.threads), bool, len(rc.threads))[rc.thread_code]
    lo, hi = g.steps[0][0], max(s[2] for s in g.steps)
    at = named & other & (rc.ts >= lo) & (rc.ts <= hi)
    return float(rc.dur[at].sum()) / len(g.steps)


def _startup_spans(findings: list[Finding]) -> Intervals:
    """The calls GP206 reports as one-off start-up work: never a per-step cost to cut (GP205 leaves them out)."""
    refs = [e for f in findings if f.code == "GP206" for ev in f.evidence for e in ev.events]
    return Intervals.from_pairs((e.ts, e.ts + e.dur) for e in refs) if refs else Intervals.empty()


# rule code -> (what removing the cause means, how to pick it on the graph); docs/critical-path.md lists it
ACTIONS: dict[str, tuple[str, _Pick]] = {
    "GP102": ("data wait gone (loading overlapped by DataLoader workers)", _data),
    "GP103": ("data wait gone", _data),
    "GP201": ("copies made asynchronous (pinned memory, non_blocking=True)", _copies(None, True)),
    "GP202": ("host→device copies made asynchronous", _copies("HtoD", True)),
    "GP203": ("the site's syncs gone", _syncs),
    "GP204": ("the small device→host copies' waits gone", _copies("DtoH", False)),
    "GP205": ("the named runtime calls' host time cut (allocator warm, calls hoisted out of the step)",
              _runtime_calls),
    "GP301": ("launch gaps closed, as one CUDA graph launch per stretch", _launches),
}
CROSS_RANK = ("GP7",)


def with_what_if(m: TraceMetrics, findings: Iterable[Finding]) -> list[Finding]:
    """``findings`` (of ``m``'s trace) with their what-if set (see the module docstring)."""
    out = []
    replayer: Replayer | None = None
    findings = list(findings)
    startup: Intervals | None = None
    for f in findings:
        action = ACTIONS.get(f.code)
        if f.origin != "trace" or f.cost_us_per_step is None and action is None:
            out.append(f)
            continue
        if action is None or not m.steps:
            out.append(dataclasses.replace(
                f, what_if_note=NOTE_CROSS_RANK if f.code.startswith(CROSS_RANK) else NOTE_NOT_REPLAYED))
            continue
        g = m.memo(build_graph)
        if replayer is None:
            replayer = Replayer(g)
        rm = action[1](g, replayer, f, m)
        if rm.cut_host:
            startup = _startup_spans(findings) if startup is None else startup
            rm = dataclasses.replace(rm, cut_host=rm.cut_host.subtract(startup))
        saving = replay_saving(replayer, rm)
        note = margin_note(f.cost_us_per_step, saving, m.mean_step_time)
        if note == NOTE_HIDDEN and action[1] is _runtime_calls \
                and _elsewhere_us(g, f, m) > MARGIN_STEP_SHARE * m.mean_step_time:
            note = NOTE_OTHER_THREADS  # the gap is (partly) calls the main thread's time line does not hold
        out.append(dataclasses.replace(f, what_if_saving_us=round(saving, 1), what_if_note=note))
    return out


def step_of(f: Finding) -> float | None:
    """The mean step a finding's cost share is of (None without both)."""
    if f.cost_us_per_step is None or not f.cost_share:
        return None
    return f.cost_us_per_step / f.cost_share


def margin_note(cost: float | None, saving: float, step: float) -> str | None:
    """Which figure to believe when the rule's cost and the replay disagree beyond the margin (None: they agree)."""
    if cost is None:
        return None
    gap = abs(saving - cost)
    if gap <= MARGIN_SHARE * max(cost, saving) or gap <= MARGIN_STEP_SHARE * step:
        return None
    return NOTE_HIDDEN if saving < cost else NOTE_STARVES


def cross_rank_not_replayed(findings: Iterable[Finding]) -> list[Finding]:
    """The cross-rank findings (GP7xx, made from the ranks' summaries, not from one trace's graph), each with a
    cost saying it is not replayed: the ranks' graphs are not joined (docs/critical-path.md)."""
    return [dataclasses.replace(f, what_if_note=NOTE_CROSS_RANK)
            if f.cost_us_per_step is not None and f.what_if_saving_us is None and f.what_if_note is None else f
            for f in findings]

