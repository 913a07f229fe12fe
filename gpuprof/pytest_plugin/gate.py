"""After a test body ran: was anything measured, does it keep its limits, or is this run the new baseline?"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from gpuprof.pytest_plugin.capture import needed_steps
from gpuprof.pytest_plugin.verdict import Verdict, judge, load_baseline

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.pytest_plugin.capture import TestCapture

__all__ = ["failure"]


def failure(plan: "TestCapture", update_baseline: bool = False) -> str | None:
    """The failure message of a test whose training broke a limit or measured nothing; None when it kept them."""
    limits = plan.limits
    result = plan.result
    run_dir = str(plan.run_dir) if plan.run_dir.is_dir() else None
    unmeasured = _unmeasured(plan)
    if unmeasured is not None:  # one line: pytest's short summary shows the reason, not a header
        where = f"; files in {run_dir}" if run_dir else ""
        return f"gpuprof: limits not checked ({limits.describe()}): {unmeasured}{where}"
    assert result is not None  # _unmeasured says so otherwise
    baseline = None
    label = "baseline"
    v = Verdict()
    if limits.baseline is not None:
        label = f"baseline {limits.baseline}"
        from gpuprof.errors import InputError

        try:
            if update_baseline:
                _write_baseline(plan)  # asked for: a baseline that cannot be written fails the test, never a warning
            else:
                baseline = load_baseline(limits.baseline)
        except (InputError, OSError) as err:
            v.broken.append(f"baseline: {err}")
    verdict = judge(result, limits, baseline, label)
    v.broken += verdict.broken
    v.details += verdict.details
    return v.text(limits, run_dir) if v.failed else None


def _unmeasured(plan: "TestCapture") -> str | None:
    """Why the limits could not be checked, or None (docs/pytest.md, "Steps": such a test fails)."""
    if plan.stood_down is not None:
        return f"gpuprof's step clock stood down: {plan.stood_down}; drop the marker or that capture"
    result = plan.result
    need = needed_steps(plan.limits)
    took = plan.optimizer_steps
    advice = "(train longer in the test, or lower steps=)"
    if result is None or result.steps == 0:
        return (f"the test body took {took} optimizer step(s); the marker counts one step per optimizer step and "
                f"needs at least {need} for steps={plan.limits.steps} {advice}")
    if result.inactive is not None:
        return f"the capture recorded nothing: {result.inactive}"
    # a body that ends inside the window leaves a partial trace (its last steps, flushed at the end): too few
    # steps all the same, never judged as if the window had been recorded (a clock that failed said so itself)
    if not result.traces or (plan.clock_running and took < need):
        return (f"the test body took {took} optimizer steps, too few for the recorded window: "
                f"steps={plan.limits.steps} needs at least {need} {advice}")
    if result.report is None:
        return "the capture wrote no report (see the warnings above)"
    return None


def _write_baseline(plan: "TestCapture") -> None:
    """``--gpuprof-update-baseline``: this run's report becomes the test's baseline (written atomically)."""
    from gpuprof.atomic import atomic_write
    from gpuprof.errors import InputError

    path = plan.limits.baseline
    result = plan.result
    assert path is not None and result is not None
    if os.path.isdir(path) or path.suffix != ".json":
        raise InputError(str(path), "--gpuprof-update-baseline writes a report.json: name a .json file as baseline=")
    saved = [f for f in result.files if os.path.basename(f) == "report.json"]
    if not saved:
        raise InputError(str(path), "this run wrote no report.json to save as the baseline")
    with open(saved[-1], "rb") as fh:  # the run's own report.json, byte for byte: the artefact and baseline agree
        data = fh.read()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data)  # a link or FIFO at PATH is replaced or refused, never followed
