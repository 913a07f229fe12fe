"""The report's views: operators, kernels, modules and ranges of one trace (docs/views.md).

:func:`gpuprof.views.build.trace_views` computes them from a trace's metrics;
:class:`gpuprof.trace.viewrows.TraceViews` is what the report carries
(``traces[].views`` in docs/report-schema.md, versioned by ``VIEWS_VERSION``).
"""
