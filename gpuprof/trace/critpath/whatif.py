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

from gpuprof.findings import Evidence, Finding
from gpuprof.trace.columns import columns
from gpuprof.trace.critpath.graph import WAIT_DATA, StepGraph, build_graph
from gpuprof.trace.critpath.replay import Removal, Replayer, replay_saving
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.threads import thread_keys
from gpuprof.units import fmt_us

__all__ = ["ACTIONS", "MARGIN_SHARE", "MARGIN_STEP_SHARE", "with_what_if", "NOTE_HIDDEN", "NOTE_STARVES", "NOTE_MORE",
           "NOTE_LOADER_CPU", "WHY_GPU", "WHY_TRANSFER", "WHY_HOST", "WHY_STARVES", "WHY_PART", "LOADER_CODES",
           "loader_saving", "carry_note", "loader_without_gpu",
           "NOTE_NOT_REPLAYED", "NOTE_CROSS_RANK", "NOTE_OTHER_THREADS", "margin_note", "step_of", "cross_rank_not_replayed",
           "call_names"]

MARGIN_SHARE = 0.25
MARGIN_STEP_SHARE = 0.01

# The notes' openings (a note goes on with the reason the graph gives: which edge kept the step, what the GPU did)
NOTE_HIDDEN = "the step still waits for what else sets it"
NOTE_STARVES = "starves the GPU"
NOTE_MORE = "saves more than the rule's cost"
NOTE_LOADER_CPU = "not replayed as a saving: no GPU in this trace"
# the reasons (derived from the replay: see _reason)
WHY_GPU = ("the GPU's queued work: the replayed step ends with the GPU, which ran work through {busy:.0%} of these "
           "waits")
WHY_TRANSFER = ("the transfers themselves and the GPU work queued with them: the replayed step ends with the GPU, "
                "which ran work through {busy:.0%} of these waits")
WHY_HOST = "the host's own work: the replayed step ends with the main thread, which ran on between these waits"
WHY_STARVES = ("the GPU work it held back (the host work that launches it waited) ends {idle} per step earlier in "
               "the replay, more than the cause's own cost")
WHY_PART = ("the rule's cost counts only part of the time removed ({waits} per step on the main thread), and the host "
            "work after it runs earlier")
NOTE_NOT_REPLAYED = "not replayed: its cause is not a node of the step graph; the rule's cost is its own estimate"
NOTE_CROSS_RANK = "not replayed: a cross-rank cause (the ranks' graphs are not joined); the rule's cost stands"
NOTE_OTHER_THREADS = ("part of these calls ran on other host threads (the autograd or a pin-memory thread): the "
                      "replay cuts only the main thread's time, as the trace does not record what the main thread "
                      "waited for on another; take the what-if as the lower bound and the rule's cost as the upper")

LOADER_CODES = ("GP102", "GP103")  # a loader fix: the data waits go to DataLoader workers

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


def with_what_if(m: TraceMetrics, findings: Iterable[Finding], cores: int | None = None) -> list[Finding]:
    """``findings`` (of ``m``'s trace) with their what-if set (see the module docstring). ``cores``: the CPU cores
    the trainer may run on, where known (a trace does not record them): a loader fix on a trace without GPU work is
    then modelled with the workers sharing them (:func:`loader_saving`)."""
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
        if f.code in LOADER_CODES and not g.n_gpu:
            out.append(_loader_without_gpu(f, saving, cores, m.mean_step_time))
            continue
        note = margin_note(f.cost_us_per_step, saving, m.mean_step_time)
        if note is not None:  # why, from the graph (one more replay, only where the figures differ)
            note = margin_note(f.cost_us_per_step, saving, m.mean_step_time, _reason(g, replayer, rm, f.cost_us_per_step))
        if note is not None and note.startswith(NOTE_HIDDEN) and action[1] is _runtime_calls \
                and _elsewhere_us(g, f, m) > MARGIN_STEP_SHARE * m.mean_step_time:
            note = NOTE_OTHER_THREADS  # the gap is (partly) calls the main thread's time line does not hold
        out.append(dataclasses.replace(f, what_if_saving_us=round(saving, 1), what_if_note=note))
    return out


def loader_saving(wait_us: float, cores: int) -> float:
    """What a loader fix saves per step on a run without GPU work, ``wait_us`` of data loading per step moved to
    DataLoader workers on a machine of ``cores`` cores (docs/critical-path.md): the trainer's compute keeps every
    core busy (PyTorch's intra-op threads, one per core), so the workers' loading takes its CPU time from it, spread
    over the cores: the step keeps ``wait_us / cores`` of it. Worker start-up and batch transfer are not counted
    (they can make the fix cost more than it saves)."""
    return max(wait_us, 0.0) * (1.0 - 1.0 / max(cores, 1))


def _loader_without_gpu(f: Finding, replayed: float, cores: int | None, step: float) -> Finding:
    """A loader fix's what-if on a trace without GPU work: the workers share the trainer's cores."""
    evidence = f.evidence + (Evidence("loader_wait_us", round(replayed, 1), None, "us",
                                      extra={"replayed": "data waits removed, no GPU work in the trace"}),)
    if cores is not None:
        saving = loader_saving(replayed, cores)
        why = (f"no GPU in this trace: DataLoader workers would load on the {cores} cores the trainer computes on, "
               f"keeping 1/{cores} of the {fmt_us(replayed)} per step of loading in the step")
        note = margin_note(f.cost_us_per_step, saving, step, (why, f"{NOTE_MORE}: {why}"))
        return dataclasses.replace(f, what_if_saving_us=round(saving, 1), what_if_note=note, evidence=evidence)
    return dataclasses.replace(f, evidence=evidence, what_if_note=(
        f"{NOTE_LOADER_CPU}: DataLoader workers would load on the cores the trainer computes on (PyTorch's own "
        f"threads use every core), so of the {fmt_us(replayed)} per step of loading the step saves at most "
        f"(1 - 1/N) of it on N cores, less the workers' start-up and batch transfer; the trace does not record N"))


def loader_without_gpu(lost: Finding, w: Finding | None = None) -> Finding | None:
    """For a loader finding whose trace had no GPU work (its ``loader_wait_us`` evidence): with ``w`` (the runtime
    finding that absorbs it, GP601, whose evidence may give the run's ``cores``), ``w`` with the loader what-if
    modelled on those cores, or with ``lost``'s note where the cores are not known; without ``w``, ``lost`` itself
    when it is such a finding (None: it is not)."""
    wait = next((e.value for e in lost.evidence if e.metric == "loader_wait_us"), None)
    if not isinstance(wait, (int, float)):
        return None
    if w is None:
        return lost
    cores = next((e.extra.get("cores") for e in w.evidence if isinstance(e.extra.get("cores"), int)), None)
    if cores is None:
        return dataclasses.replace(w, what_if_note=lost.what_if_note)
    step = step_of(w) or step_of(lost) or 0.0
    return _loader_without_gpu(w, float(wait), cores, step)


def _reason(g: StepGraph, r: Replayer, rm: Removal, cost: float | None) -> tuple[str, str]:
    """Why the replay and the rule's cost differ, from the replay (which edge ends the replayed steps, what the GPU
    did during the waits removed): ``(reason if it saves less, reason if it saves more)``."""
    n = max(len(g.steps), 1)
    ws = sorted(rm.drop | rm.make_async)
    spans = Intervals.from_pairs((float(g.w_ts[w]), float(g.w_end[w])) for w in ws)
    waits = spans.total() + rm.cut_host.total()
    gpu_iv = Intervals.from_arrays(g.g_ts, g.g_end) if g.n_gpu else Intervals.empty()
    busy = gpu_iv.intersect(spans).total() / spans.total() if spans.total() > 0 else 0.0
    host, gpu = r.ends(rm)
    if g.n_gpu and (gpu >= host or r.last_held):  # the GPU ends the replayed steps, or released their last wait
        less = (WHY_TRANSFER if rm.make_async else WHY_GPU).format(busy=busy)
    else:
        less = WHY_HOST
    _h0, gpu0 = r.recorded
    if g.n_gpu and (gpu0 - gpu) / n > (cost or 0.0):
        # GPU work the cause held back: in the replay it ends earlier, by more than the cause's own cost
        more = f"{NOTE_STARVES}: " + WHY_STARVES.format(idle=fmt_us((gpu0 - gpu) / n))
    else:
        more = f"{NOTE_MORE}: " + WHY_PART.format(waits=fmt_us(waits / n))
    return less, more


def carry_note(cost: float | None, saving: float, step: float, note: str | None) -> str | None:
    """:func:`margin_note` for a what-if carried to another finding of the same problem (GP601 absorbing GP102):
    the carried ``note``'s reason where the figures still differ the same way, else the note without a reason."""
    new = margin_note(cost, saving, step)
    if new is None or note is None:
        return new
    if new.startswith(NOTE_HIDDEN) == note.startswith(NOTE_HIDDEN) and note.startswith(
            (NOTE_HIDDEN, NOTE_STARVES, NOTE_MORE)):
        return note
    return new


def step_of(f: Finding) -> float | None:
    """The mean step a finding's cost share is of (None without both)."""
    if f.cost_us_per_step is None or not f.cost_share:
        return None
    return f.cost_us_per_step / f.cost_share


def margin_note(cost: float | None, saving: float, step: float,
                reasons: tuple[str, str] | None = None) -> str | None:
    """Which figure to believe when the rule's cost and the replay disagree beyond the margin (None: they agree).
    ``reasons``: why, if the replay saves less and if it saves more (:func:`_reason`, from the graph); without them,
    the note says only which figure to believe."""
    if cost is None:
        return None
    gap = abs(saving - cost)
    if gap <= MARGIN_SHARE * max(cost, saving) or gap <= MARGIN_STEP_SHARE * step:
        return None
    if saving < cost:
        why = f": {reasons[0]}" if reasons else ""
        return f"{NOTE_HIDDEN}{why}; the replay saves less than the rule's cost; believe the what-if"
    return f"{reasons[1] if reasons else NOTE_MORE}; believe the what-if"


def cross_rank_not_replayed(findings: Iterable[Finding]) -> list[Finding]:
    """The cross-rank findings (GP7xx, made from the ranks' summaries, not from one trace's graph), each with a
    cost saying it is not replayed: the ranks' graphs are not joined (docs/critical-path.md)."""
    return [dataclasses.replace(f, what_if_note=NOTE_CROSS_RANK)
            if f.cost_us_per_step is not None and f.what_if_saving_us is None and f.what_if_note is None else f
            for f in findings]

