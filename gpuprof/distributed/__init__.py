"""Cross-rank analysis of a distributed job (torch-free).

Each rank's trace is analysed alone into a small :class:`RankSummary`
(:mod:`gpuprof.distributed.summary`); :func:`merge` compares the summaries
(:mod:`gpuprof.distributed.merge`) and the GP7xx cross-rank rules
(:mod:`gpuprof.distributed.rules`) read the result. The merge never touches a
trace, so it costs the same for 2 ranks or 2,000 and can run where the
summaries are (``report.json`` files written on each node).

This package is imported by the trace loader (for the collective names), so
its ``__init__`` stays light.
"""
