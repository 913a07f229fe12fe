"""Run history: the headline figures and findings of every saved run report under a log directory (docs/history.md).

:mod:`gpuprof.history.runs` finds and reads the reports, one run per
directory; :mod:`gpuprof.history.changes` marks the change points and the
findings that appeared or disappeared; :mod:`gpuprof.history.render` draws
the terminal table and the JSON document.
"""
