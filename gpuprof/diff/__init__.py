"""``gpuprof diff``: two runs compared, operator by operator and finding by finding (docs/diff.md).

:func:`gpuprof.diff.compare.diff_reports` compares two reports in their JSON
form (docs/report-schema.md), so a live analysis, a saved ``report.json`` and
the TensorBoard plugin's run views all go through the same code;
:mod:`gpuprof.diff.gate` decides a CI regression; :mod:`gpuprof.diff.render`
draws the result for people.
"""
