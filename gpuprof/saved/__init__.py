"""Reading a saved ``report.json`` back: one typed reader and one set of run figures (docs/report-schema.md).

* :mod:`gpuprof.saved.types`: :class:`SavedReport`, the report as msgspec types with their ranges;
* :mod:`gpuprof.saved.check`: what the types cannot say (a step's ceiling, counts against the trace's events);
* :mod:`gpuprof.saved.read`: the file (regular, bounded, JSON, schema 1.x), decoded and checked;
* :mod:`gpuprof.saved.figures`: :class:`RunFigures`, a run's headline figures, computed once.
"""

from gpuprof.saved.check import ReportProblem, saved_report
from gpuprof.saved.figures import RunFigures
from gpuprof.saved.types import SavedFinding, SavedReport, SavedTrace

# the file reader (gpuprof.saved.read) is imported where a saved file is read: a trace's analysis never loads it
__all__ = ["ReportProblem", "RunFigures", "SavedFinding", "SavedReport", "SavedTrace", "saved_report"]
