"""Cross-rank rules (GP7xx): diagnoses that need more than one rank's trace.

Same shape as the trace rules (:class:`gpuprof.rules.base.Rule`): a stable
code, a name, a docstring, options, a bad and a good example; ``check``
reads the merged :class:`~gpuprof.distributed.merge.CrossRank` instead of one
trace. They are run by the one rule runner (:func:`gpuprof.runner.run_rules`:
one failure policy, severity follows cost). Costs are per step, labelled in
the message; their share is of the job's mean step (the median over ranks of
each rank's mean step: :func:`job_step_us`), the same denominator as trace
rules, and never above 100% of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Iterator, Mapping

from gpuprof.codespec import Option
from gpuprof.distributed.whatif import overlap_what_if, straggler_what_if
from gpuprof.findings import Evidence, Finding, Severity
from gpuprof.rules.base import RuleSpec, add_rule
from gpuprof.runner import RuleFailure, RuleUnit, Selection, run_rules
from gpuprof.units import fmt_bytes, fmt_us

if TYPE_CHECKING:  # pragma: no cover - the merge (and its arrival model) only when two ranks are compared
    from gpuprof.distributed.merge import CrossRank

__all__ = ["CrossRankRule", "all_cross_rank_rules", "run_cross_rank_rules", "job_step_us"]

_PHASE_WORDS = {
    "compute": "compute",
    "optimizer": "the optimizer step",
    "data_loading": "data loading",
    "host": "host work while its device idles",
    "sync": "synchronisation",
    "unrecorded": "host time with nothing recorded (a sleep, Python work outside operators, a blocking call "
                  "the profiler does not see)",
}

class CrossRankRule(RuleSpec):
    """Base class of the GP7xx cross-rank rules (see the module docstring); declared like a trace rule."""

    origin: ClassVar[str] = "distributed"

    def check(self, job: CrossRank, opts: Mapping[str, Any]) -> Iterable[Finding]:  # pragma: no cover
        raise NotImplementedError

    def finding(self, job: CrossRank, message: str, advice: str, *, cost_us: float, cost_label: str,
                evidence: Iterable[Evidence] = ()) -> Finding:
        step = job_step_us(job)
        evidence = tuple(evidence)
        if step > 0 and cost_us > step:
            # a cost per step cannot exceed the step: what is measured beyond it is kept, labelled, as evidence
            evidence += (Evidence("cost_measured_us_per_step", round(cost_us, 1), round(step, 1), "us",
                                  extra={"capped_at": "the mean step"}),)
            cost_us = step
        share = cost_us / step if step > 0 else None
        tail = f" ({share:.1%} of the mean step)" if share is not None else ""
        return Finding(code=self.code, name=self.name, severity=self.severity,
                       message=f"{message}; cost: {cost_label}, {fmt_us(cost_us)} per step{tail}",
                       advice=" ".join(advice.split()), evidence=evidence, cost_us_per_step=cost_us, cost_share=share,
                       origin="trace", source="cross-rank")


_REGISTRY: dict[str, type[CrossRankRule]] = {}


def register(cls: type[CrossRankRule]) -> type[CrossRankRule]:
    return add_rule(_REGISTRY, cls)


def all_cross_rank_rules() -> list[type[CrossRankRule]]:
    return [_REGISTRY[c] for c in sorted(_REGISTRY)]


def job_step_us(job: CrossRank) -> float:
    """The denominator of cross-rank cost shares: the median over ranks of each rank's mean step (µs).

    A mean step, as for trace rules (gpuprof.flow): the costs are means per
    step. Falls back to the median step where the ranks' summaries are absent.
    """
    import statistics

    means = [s.step_mean_us for s in job.summaries if s.step_mean_us > 0]
    return statistics.median(means) if means else job.step_us


def run_cross_rank_rules(job: CrossRank, options: Mapping[str, Mapping[str, Any]] | None = None,
                         select: Iterable[str] = (), ignore: Iterable[str] = (),
                         failures: list[RuleFailure] | None = None) -> list[Finding]:
    """Every cross-rank rule that ``select``/``ignore`` wants, on one merged job, by the one runner.

    The failure policy is :func:`gpuprof.runner.run_rules`'s: every rule runs,
    then without a ``failures`` list or in strict mode
    :class:`~gpuprof.errors.RuleError` (exit 3) names every failed code; with
    one, ``(code, exception)`` is appended to it.
    """
    wanted = Selection.of(select, ignore)
    units = []
    for cls in all_cross_rank_rules():
        if wanted.wants(cls.code):
            opts = {**cls.defaults(), **dict((options or {}).get(cls.code, {}))}
            units.append(RuleUnit(cls.code, opts, lambda cls=cls, opts=opts: cls().check(job, opts)))  # type: ignore[misc]
    return run_rules(units, "cross-rank analysis", failures)


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


@register
class StragglerRank(CrossRankRule):
    """One rank (or a few) arrives last at the collectives, step after step, and every other rank waits for it.

    A collective cannot finish before its last rank arrives, so the job runs
    at the pace of its slowest rank: the others spend the difference waiting
    inside all-reduce / all-gather. gpuprof reads the arrival order at every
    collective matched across ranks (a rank's duration minus the shortest any
    rank had is its wait; the ranks that waited no more than the noise floor
    arrived last) and names the rank(s) the others wait for consistently: in
    most steps, above a floor, and far more than for any other rank (ranks
    taking turns, as on a busy shared host, name no one). The wait is split
    into the part from before the recorded step began (the rank entered the
    step late: not explainable from the trace) and the part inside the step,
    attributed to the phases in which the straggler spends more time than the
    median other rank before the collectives it arrives last at (data loading,
    compute, optimizer, host work, sync, or host time with nothing recorded,
    such as a sleep). The cost is the others' in-step wait per step.
    """

    code = "GP701"
    name = "straggler-rank"
    title = "A slow rank makes every other rank wait in collectives"
    options = (Option("min_wait_share", 0.05, "the others must wait at least this share of the step for the straggler"),)
    bad_example = """\
        # rank 1 does extra host work every step; the others wait for it in all-reduce
        if dist.get_rank() == 1:
            time.sleep(0.04)  # or: a slower data pipeline, logging, a checkpoint write
        loss = model(x).sum(); loss.backward()
    """
    good_example = """\
        # the same work on every rank; logging/checkpoints off the hot path or on all ranks alike
        loss = model(x).sum(); loss.backward()
    """

    def check(self, job: CrossRank, opts: Mapping[str, Any]) -> Iterator[Finding]:
        arr = job.arrivals
        if not job.stragglers or job.others_wait_us < opts["min_wait_share"] * job.step_us:
            return
        whole = _series_verdict(job, opts["min_wait_share"])
        if whole is not None and whole.rank in job.stragglers:
            return  # GP707 names it from every step, with this window's arrival order as its cause
        slow = job.stragglers
        others = [r for r in job.ranks if r.rank not in slow]
        waits = ", ".join(f"rank {r.rank} {fmt_us(r.wait_us)}" for r in others[:8])
        lasts = f"{arr.last_at_per_step:.1f} of {arr.collectives_per_step:.1f} collectives"
        phases = sorted(arr.phases.items(), key=lambda kv: -kv[1])
        cause = ("; before the collectives it arrives last at, it spends more time than the median other rank in "
                 + ", ".join(f"{_PHASE_WORDS[k]} +{fmt_us(v)}" for k, v in phases[:3]) + " per step") if phases else ""
        before = (f"; besides, the others wait {fmt_us(arr.before_step_us)} per step for ranks that entered the "
                  "recorded step late (happened before the recording: not explainable from this trace)"
                  if arr.before_step_ranks else "")
        cost = min(job.others_wait_us, job.step_us) if job.step_us > 0 else job.others_wait_us
        found = self.finding(
            job,
            f"straggler: {_ranks(slow)} of {len(job.ranks)}, last to arrive at {lasts} per step; the other ranks "
            f"wait for it {fmt_us(arr.waited_us)} per step (median over steps; in {arr.steps_waited} of "
            f"{arr.steps} steps above {fmt_us(arr.floor_us)}; wait in collectives per step: {waits}"
            f"{', ...' if len(others) > 8 else ''}){cause}{before}",
            """\
            Make the slow rank do what the others do: look at its data loading (more workers, the same
            sampler shard sizes), any per-rank work (logging, evaluation, checkpointing on rank 0 only),
            and its hardware (a throttled GPU, a busy host). Compare its trace with another rank's around
            the collectives it arrives last at.
            """,
            cost_us=cost,
            cost_label="other ranks waiting inside the step for the straggler",
            evidence=[Evidence("straggler_ranks", ",".join(map(str, slow))),
                      Evidence("others_wait_us_per_step", round(job.others_wait_us, 1), unit="us",
                               threshold=round(max(opts["min_wait_share"] * job.step_us, arr.floor_us), 1),
                               extra={"median_us_per_step": round(arr.waited_us, 1),
                                      "steps_waited": arr.steps_waited, "steps": arr.steps}),
                      Evidence("cause", job.straggler_cause or "unknown",
                               extra={"excess_us_per_step": {k: round(v, 1) for k, v in phases}}),
                      Evidence("before_step_wait_us_per_step", round(arr.before_step_us, 1), unit="us",
                               extra={"ranks": ",".join(map(str, arr.before_step_ranks))})],
        )
        yield found if arr.what_if_us is None else straggler_what_if(found, arr.what_if_us, job.step_us)


def _series_verdict(job: CrossRank, min_wait_share: float) -> Any:
    from gpuprof.distributed.series import series_straggler

    return series_straggler(job.summaries, min_wait_share)


@register
class StragglerOverTheJob(CrossRankRule):
    """A rank the others wait for in most steps of the whole job, from every rank's per-step series.

    The watch times every step of every rank; the ranks' series travel to rank 0 with their summaries
    (gpuprof.distributed.series). In a job whose ranks meet in collectives every step, their step times are
    alike, so the rank that waits longest for its own data, every step, is the one the others wait for. The
    finding names that rank, the share of the common steps it is last in, what it costs the others per step
    (its median data-wait excess over the median other rank), its own split (data wait; the rest: host and
    compute), its recurrence over the job (each quarter's share), and, where a window was recorded, the
    window's arrival order at the collectives (GP701 then stays silent: one answer). A rank slow in host or
    compute work is not seen here (the watch does not time collectives): GP701 reads it from the window.
    """

    code = "GP707"
    name = "straggler-over-the-job"
    title = "A rank waits for its data in most steps of the job, and the others wait for it"
    options = (Option("min_wait_share", 0.05, "the others must wait at least this share of the median step"),
               Option("min_last_share", 0.5, "the rank must be last in at least this share of the common steps"))
    bad_example = """\
        # rank 1's DataLoader is slower (a slower disk, fewer workers, heavier samples): every step,
        # the other ranks wait for it in the gradient all-reduce
        loader = DataLoader(ds, num_workers=0 if rank == 1 else 4)
    """
    good_example = """\
        # the same input pipeline on every rank, fast enough to keep ahead of the step
        loader = DataLoader(ds, num_workers=4, pin_memory=True, persistent_workers=True)
    """

    def check(self, job: CrossRank, opts: Mapping[str, Any]) -> Iterator[Finding]:
        from gpuprof.distributed.series import series_straggler

        v = series_straggler(job.summaries, opts["min_wait_share"], opts["min_last_share"])
        if v is None:
            return
        quarters = ", ".join(f"steps {a}-{b} {share:.0%}" for a, b, share in v.quarters)
        every = all(share >= opts["min_last_share"] for _, _, share in v.quarters)
        recur = ("in every quarter of the job" if every else "not throughout the job") + f" ({quarters})"
        arr = job.arrivals
        if job.stragglers and v.rank in job.stragglers:
            window = (f"; the recorded window agrees: rank {v.rank} arrives last at {arr.last_at_per_step:.1f} of "
                      f"{arr.collectives_per_step:.1f} collectives per step, the others waiting "
                      f"{fmt_us(arr.waited_us)} per step for it there")
        elif job.stragglers:
            window = (f"; in the recorded window's few steps {_ranks(job.stragglers)} arrived last instead "
                      "(a one-off there, or a second slow rank: compare their traces)")
        else:
            window = ""
        share = v.excess_us / v.step_us if v.step_us > 0 else None
        cost = min(v.excess_us, v.step_us) if v.step_us > 0 else v.excess_us
        message = (
            f"straggler over the whole job: rank {v.rank} of {v.ranks} waits longest for its data in "
            f"{v.last_points} of {v.points} common {'steps' if v.bucket == 1 else f'buckets of {v.bucket} steps'} "
            f"({v.last_share:.0%}), {fmt_us(v.excess_us)} per step more than the median other rank, so the "
            f"others wait about that long for it in their collectives every step; its own split per step: "
            f"data wait {fmt_us(v.data_wait_us)} (others {fmt_us(v.others_data_wait_us)}), the rest (host and "
            f"compute, its collectives included) {fmt_us(v.rest_us)}; {recur}{window}; cost: other ranks "
            f"waiting for rank {v.rank}'s data, {fmt_us(cost)} per step"
            + (f" ({share:.1%} of the median step)" if share is not None else ""))
        yield Finding(
            code=self.code, name=self.name, severity=self.severity, message=message,
            advice=" ".join(f"""
                Make rank {v.rank}'s input pipeline as fast as the others': more DataLoader workers on it
                (num_workers, persistent_workers=True, prefetch_factor), the same sampler shard sizes, no extra
                per-rank decoding or I/O on it; check its disk or network. Then the others stop waiting for it
                in every all-reduce.""".split()),
            evidence=(Evidence("straggler_rank", str(v.rank)),
                      Evidence("others_wait_us_per_step", round(v.excess_us, 1),
                               round(opts["min_wait_share"] * v.step_us, 1), "us",
                               extra={"last_points": v.last_points, "points": v.points, "bucket": v.bucket,
                                      "steps": v.steps, "step_us": round(v.step_us, 1)}),
                      Evidence("split_us_per_step", round(v.data_wait_us, 1), unit="us",
                               extra={"data_wait_us": round(v.data_wait_us, 1),
                                      "others_data_wait_us": round(v.others_data_wait_us, 1),
                                      "rest_us": round(v.rest_us, 1)}),
                      Evidence("last_share_by_quarter", round(min(s for _, _, s in v.quarters), 3),
                               extra={f"{a}-{b}": round(s, 3) for a, b, s in v.quarters})),
            cost_us_per_step=cost, cost_share=min(share, 1.0) if share is not None else None,
            origin="trace", source="cross-rank",
        )


@register
class ExposedCommunication(CrossRankRule):
    """Collective transfers are not hidden behind compute: the step waits for the data to move.

    With DDP/FSDP, gradient all-reduce (or all-gather / reduce-scatter) should
    run while the backward pass still computes. This rule counts only the
    *transfer* part of each collective (at most the fastest rank's duration
    of it) that no compute runs beside, per step, median over ranks: time
    spent waiting in a collective for a later rank is not a transfer (GP701
    reports it, and bucket sizes or prefetching do not shorten it).
    """

    code = "GP702"
    name = "exposed-communication"
    title = "Communication not overlapped with compute"
    options = (Option("min_share", 0.10, "report when exposed transfer time is at least this share of the step"),)
    bad_example = """\
        # one big bucket: all-reduce starts only when backward has finished
        model = DDP(model, bucket_cap_mb=10_000)
    """
    good_example = """\
        # buckets of the default size overlap all-reduce with the rest of backward;
        # FSDP: forward/backward prefetch; more compute per step (larger micro-batch) hides more
        model = DDP(model, bucket_cap_mb=25)
    """

    def check(self, job: CrossRank, opts: Mapping[str, Any]) -> Iterator[Finding]:
        import statistics

        exposed = statistics.median(r.exposed_comm_us for r in job.ranks)
        comm = statistics.median(r.comm_us for r in job.ranks)
        own = min(job.exposed_transfer_us, job.step_us)
        if job.step_us <= 0 or own < opts["min_share"] * job.step_us:
            return
        found = self.finding(
            job,
            f"collective transfers take {fmt_us(own)} per step with no compute beside them (median over ranks; "
            f"communication spans {fmt_us(comm)} per step, {fmt_us(exposed)} of it with no compute beside it, "
            "waiting for other ranks included)",
            """\
            Overlap communication with compute: keep DDP's gradient buckets small enough to start
            during backward (bucket_cap_mb), avoid a synchronisation right after backward, use FSDP
            prefetching, or raise the compute per step (larger micro-batches) so the same traffic
            is hidden. On slow links, compress gradients (DDP comm hooks) or reduce the world size.
            """,
            cost_us=own,
            cost_label="collective transfer time not overlapped with compute (waiting excluded)",
            evidence=[Evidence("exposed_transfer_us_per_step", round(own, 1), unit="us",
                               threshold=round(opts["min_share"] * job.step_us, 1)),
                      Evidence("exposed_comm_us_per_step", round(exposed, 1), unit="us"),
                      Evidence("comm_us_per_step", round(comm, 1), unit="us")],
        )
        yield overlap_what_if(found, job.summaries, job.step_us)


@register
class SyncEveryMicroBatch(CrossRankRule):
    """Gradients are all-reduced after every micro-batch of a gradient accumulation.

    Under gradient accumulation, DDP synchronises gradients at the end of
    every ``backward()`` unless the micro-batches before the last run inside
    ``model.no_sync()``. The trace shows more DDP forward passes than
    optimizer steps and an all-reduce round after each of them: N rounds of
    communication where one would do. The cost is the all-reduce time of the
    extra rounds (the fastest rank's durations).
    """

    code = "GP703"
    name = "sync-every-micro-batch"
    title = "Gradient all-reduce on every micro-batch (no no_sync())"
    options = (Option("max_rounds", 1.5, "all-reduce rounds per optimizer step above which the rule fires"),)
    bad_example = """\
        for i, (x, y) in enumerate(micro_batches):
            loss_fn(ddp_model(x), y).backward()  # all-reduce after every micro-batch
        opt.step(); opt.zero_grad()
    """
    good_example = """\
        for i, (x, y) in enumerate(micro_batches):
            last = i == len(micro_batches) - 1
            with contextlib.nullcontext() if last else ddp_model.no_sync():
                loss_fn(ddp_model(x), y).backward()  # one all-reduce, after the last
        opt.step(); opt.zero_grad()
    """

    def check(self, job: CrossRank, opts: Mapping[str, Any]) -> Iterator[Finding]:
        rounds = job.ddp_rounds_per_optimizer_step
        if rounds is None or rounds <= opts["max_rounds"] or job.ddp_forwards_per_step <= job.optimizer_steps_per_step:
            return
        ar = next((c for c in job.collectives if c.type == "all_reduce"), None)
        if ar is None:
            return
        extra_share = 1 - 1 / rounds
        cost = ar.per_step * ar.mean_us * extra_share
        yield self.finding(
            job,
            f"{rounds:.1f} gradient all-reduce rounds per optimizer step "
            f"({job.ddp_forwards_per_step:.1f} DDP forward passes and {job.optimizer_steps_per_step:.1f} optimizer "
            f"steps per step, {ar.per_step:.0f} all-reduces per step)",
            """\
            Wrap every micro-batch but the last in `with ddp_model.no_sync():` so gradients are
            accumulated locally and all-reduced once per optimizer step.
            """,
            cost_us=cost,
            cost_label="all-reduce of the extra rounds",
            evidence=[Evidence("rounds_per_optimizer_step", round(rounds, 2), threshold=opts["max_rounds"]),
                      Evidence("all_reduce_per_step", round(ar.per_step, 2))],
        )


@register
class SmallCollectives(CrossRankRule):
    """Many small collectives per step: each pays a fixed latency, so the links stay underused.

    A collective's cost is a latency (microseconds to tens of microseconds,
    more across nodes) plus its bytes over the bandwidth. Hundreds of small
    messages per step (DDP with tiny buckets, per-parameter all-reduce, many
    ``dist.all_reduce`` of scalars for logging) spend their time in latency.
    """

    code = "GP704"
    name = "small-collectives"
    title = "Many small collectives per step"
    options = (Option("small_bytes", 1 << 20, "a collective under this many bytes is small"),
               Option("min_per_step", 16, "report from this many small collectives per step"))
    bad_example = """\
        model = DDP(model, bucket_cap_mb=0.1)    # hundreds of tiny all-reduces
        for v in metrics.values():
            dist.all_reduce(v)                    # one collective per logged scalar
    """
    good_example = """\
        model = DDP(model)                        # default 25 MB buckets
        dist.all_reduce(torch.stack(list(metrics.values())))  # one collective for all scalars
    """

    def check(self, job: CrossRank, opts: Mapping[str, Any]) -> Iterator[Finding]:
        if job.small_per_step < opts["min_per_step"]:
            return
        yield self.finding(
            job,
            f"{job.small_per_step:.0f} collectives per step are under {fmt_bytes(opts['small_bytes'])}",
            """\
            Fuse them: larger DDP buckets (bucket_cap_mb), flatten parameters/gradients before
            communicating, batch logged scalars into one tensor and one all_reduce.
            """,
            cost_us=job.small_us_per_step,
            cost_label="time in small collectives (fastest rank)",
            evidence=[Evidence("small_collectives_per_step", round(job.small_per_step, 1),
                               threshold=opts["min_per_step"])],
        )


@register
class FindUnusedParameters(CrossRankRule):
    """DDP searches the autograd graph for unused parameters on every forward pass.

    With ``find_unused_parameters=True``, DDP traverses the autograd graph
    after each forward to mark parameters that will get no gradient (the
    trace shows ``torch.distributed.ddp.reducer::search_unused_parameters``),
    and it cannot start all-reducing a bucket until it knows. A model whose
    parameters all get gradients pays this for nothing. The cost is the
    search's time per step (median over ranks).
    """

    code = "GP705"
    name = "find-unused-parameters"
    title = "DDP find_unused_parameters=True searches the graph every step"
    options = (Option("min_us", 0.0, "report when the search takes at least this many µs per step"),)
    bad_example = """\
        model = DDP(model, find_unused_parameters=True)  # every parameter is used: a search for nothing
    """
    good_example = """\
        model = DDP(model)                                # the default: no search
        # parameters really unused in some steps? static_graph=True searches only once
    """

    def check(self, job: CrossRank, opts: Mapping[str, Any]) -> Iterator[Finding]:
        if job.unused_searches_per_step <= 0 or job.unused_search_us < opts["min_us"]:
            return
        yield self.finding(
            job,
            f"DDP searches for unused parameters {job.unused_searches_per_step:.1f} times per step "
            "(find_unused_parameters=True)",
            """\
            If every parameter gets a gradient in every step, drop find_unused_parameters=True. If some
            are unused in the same way every step, pass static_graph=True (one search, then reused).
            """,
            cost_us=job.unused_search_us,
            cost_label="the unused-parameter search",
            evidence=[Evidence("unused_parameter_searches_per_step", round(job.unused_searches_per_step, 2))],
        )


@register
class LateRanks(CrossRankRule):
    """Ranks that held up the collectives of too few recorded steps to call them stragglers.

    GP701 names a straggler only when the others wait for it step after step: one or two recorded steps
    cannot tell a consistent straggler from a one-off (a rank that hit a page fault, a checkpoint, a
    late start). The arrival analysis still shows who the others waited for in those steps (the cross-rank
    table's "last to arrive" column); this finding names those ranks, as info, with the one-step caveat:
    each rank the others waited for above GP701's floor inside the recorded steps, how long, and at how
    many collectives it arrived last. No cost: one step is no per-step cost to plan on. Silent when GP701
    has named a straggler, and on jobs recorded for more than ``max_steps`` steps.
    """

    code = "GP706"
    name = "late-ranks"
    title = "Ranks the others waited for in the few recorded steps (too few steps to call a straggler)"
    severity = Severity.INFO
    options = (Option("max_steps", 2, "report when the ranks share at most this many recorded steps "
                                      "(GP701 needs more to tell a straggler from a one-off)"),)
    bad_example = """\
        prof = torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=1))
        # one recorded step: rank 3 arrives late at the all-reduce; is it always late?
    """
    good_example = """\
        prof = torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=5))
        # five recorded steps: GP701 tells a consistent straggler from a one-off
    """

    def check(self, job: CrossRank, opts: Mapping[str, Any]) -> Iterator[Finding]:
        arr = job.arrivals
        if job.stragglers or arr.steps < 1 or arr.steps > opts["max_steps"]:
            return
        late = sorted(((r, w) for r, w in arr.in_step_us.items() if w >= arr.floor_us), key=lambda rw: -rw[1])
        if not late:
            return
        last_at = {r: sum(1 for row in arr.rows if r in row.last) for r, _ in late}
        steps = "the one recorded step" if arr.steps == 1 else f"the {arr.steps} recorded steps"
        named = "; ".join(f"rank {r}: the others waited {fmt_us(w)} per step for it, last to arrive at "
                          f"{last_at[r]} of {len(arr.rows)} collective positions" for r, w in late[:8])
        before = (f"; besides, {fmt_us(arr.before_step_us)} per step of waiting for ranks that entered the step late "
                  "(before the recording)" if arr.before_step_ranks else "")
        yield Finding(
            code=self.code, name=self.name, severity=self.severity,
            message=f"in {steps}, the other ranks waited inside collectives for {_ranks([r for r, _ in late])} "
                    f"({named}){before}. With {arr.steps} step{'s' if arr.steps > 1 else ''} this may be a one-off, "
                    "not a straggler: record more steps to tell (GP701)",
            advice=" ".join("""
                Record at least 3-5 steps on every rank (torch.profiler.schedule(..., active=5)) so a rank
                that is late every step (GP701, with its cause) is told from a one-off delay; meanwhile,
                compare the named rank's trace with another's before the collectives it arrived last at.
                """.split()),
            evidence=(Evidence("late_ranks", ",".join(str(r) for r, _ in late)),
                      Evidence("others_wait_us_per_step", round(late[0][1], 1), round(arr.floor_us, 1), "us",
                               extra={"per_rank_us": {str(r): round(w, 1) for r, w in late},
                                      "last_at": {str(r): n for r, n in last_at.items()},
                                      "steps": arr.steps, "max_steps": opts["max_steps"]}),),
            origin="trace", source="cross-rank",
        )
