"""The cross-rank step of ``gpuprof analyze``: merge rank summaries, run the GP7xx rules."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from gpuprof.distributed.merge import CrossRank, merge
from gpuprof.distributed.rules import SmallCollectives, StragglerRank, run_cross_rank_rules
from gpuprof.distributed.summary import RankSummary
from gpuprof.findings import Finding

__all__ = ["cross_rank"]


def cross_rank(summaries: Sequence[RankSummary], options: Mapping[str, Mapping[str, Any]] | None = None,
               select: Iterable[str] = (), ignore: Iterable[str] = (),
               failures: list[tuple[str, BaseException]] | None = None) -> tuple[CrossRank, list[Finding]]:
    """The ``cross_rank`` section and the GP7xx findings of a job's rank summaries."""
    options = options or {}
    small = options.get(SmallCollectives.code, {}).get("small_bytes", SmallCollectives.defaults()["small_bytes"])
    share = options.get(StragglerRank.code, {}).get("min_wait_share", StragglerRank.defaults()["min_wait_share"])
    job = merge(summaries, small_bytes=int(small), straggler_min_share=float(share))
    found = run_cross_rank_rules(job, options, select, ignore, failures)
    return job, found
