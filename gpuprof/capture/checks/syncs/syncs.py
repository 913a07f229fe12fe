"""Host-sync locator (GP630).

During recorded steps on CUDA, ``torch.cuda.set_sync_debug_mode("warn")``
makes PyTorch warn ("called a synchronizing CUDA operation") each time an
operation blocks the host until the GPU catches up (``.item()``, ``.cpu()``,
``nonzero``, a blocking copy, ...). The locator takes those warnings away
from the console, attributes each to the innermost source line outside torch
and gpuprof, and counts them per step. Other warnings pass through untouched.
"""

from __future__ import annotations

import linecache
import re
import warnings
from collections import Counter
from typing import Any, Callable, TextIO, cast

from gpuprof.capture.config import CheckOptions
from gpuprof.findings import Evidence, Finding, SourceLocation
from gpuprof.frames import user_frame
from gpuprof.runtimecodes import runtime_check

__all__ = ["SYNC_WARNING_TEXT", "SyncLocator", "is_logging_line"]

SYNC_WARNING_TEXT = "called a synchronizing CUDA operation"

# A source line that logs: print, logging, TensorBoard, wandb, mlflow, tqdm's postfix. Logging a CUDA
# tensor (or its .item()) every step is the commonest per-step sync; its fix is "log every N steps".
_LOGGING_LINE_RE = re.compile(
    r"(?:^|[^\w.])print\s*\(|\b(?:log|logger|logging|_log|LOG|LOGGER)\.(?:debug|info|warning|warn|error|critical|log)\s*\("
    r"|\bself\.log(?:_dict)?\s*\(|\.add_(?:scalars?|histogram|image|text)\s*\(|\bwandb\.log\s*\(|\.log_metrics?\s*\(|\.set_postfix\s*\("
)
_ADVICE = ("Keep values on the GPU inside the step: accumulate losses as tensors and call "
           ".item() once per logging interval; avoid .cpu()/.tolist()/nonzero()/bool(tensor) "
           "in the hot loop; copy host tensors with non_blocking=True from pinned memory.")
_LOGGING_ADVICE = ("Log every N steps (if step % 50 == 0): keep running values on the GPU "
                   "(total += loss.detach()) and read them with .item() only then; logging a CUDA tensor "
                   "or its .item() every step makes the host wait for the whole step's GPU work.")


def is_logging_line(text: str) -> bool:
    """True for a source line that logs (``print(...)``, ``logger.info(...)``, ``writer.add_scalar(...)``,
    ``wandb.log(...)``, ``mlflow.log_metric(...)``, Lightning's ``self.log(...)``,
    ``pbar.set_postfix(...)``)."""
    return bool(_LOGGING_LINE_RE.search(text))


def _set_cuda_mode(mode: str) -> int:
    import torch

    prev = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(mode)
    return prev


def _restore_cuda_mode(prev: int) -> None:
    import torch

    torch.cuda.set_sync_debug_mode(prev)


class SyncLocator:
    """Counts sync warnings by source line while installed.

    ``set_mode``/``restore_mode`` default to the CUDA ones; tests pass others.
    """

    def __init__(
        self,
        set_mode: Callable[[str], int] = _set_cuda_mode,
        restore_mode: Callable[[int], None] = _restore_cuda_mode,
    ) -> None:
        self._set_mode = set_mode
        self._restore_mode = restore_mode
        self.sites: Counter[tuple[str, int, str]] = Counter()
        self.steps = 0  # recorded steps while installed
        self._prev_mode = 0
        self._prev_show: Callable[..., None] = warnings.showwarning  # set again by install()
        self._filter: Any = None
        self.installed = False

    def install(self) -> None:
        if self.installed:
            return
        self._prev_mode = self._set_mode("warn")
        # "always": the default filter would show one warning per line and hide the count
        warnings.filterwarnings("always", message=SYNC_WARNING_TEXT)
        self._filter = warnings.filters[0]
        self._prev_show = warnings.showwarning
        warnings.showwarning = self._show
        self.installed = True

    def uninstall(self) -> None:
        if not self.installed:
            return
        self.installed = False
        try:
            self._restore_mode(self._prev_mode)
        finally:
            if warnings.showwarning is self._show:  # the user may have replaced it meanwhile
                warnings.showwarning = self._prev_show
            try:
                cast("list[Any]", warnings.filters).remove(self._filter)  # a list at runtime; typeshed says Sequence
                warnings._filters_mutated()  # type: ignore[attr-defined]
            except (ValueError, AttributeError):
                pass  # the filter list was reset by the user (warnings.resetwarnings): nothing to remove

    def _show(self, message: Warning | str, category: type[Warning], filename: str, lineno: int,
              file: TextIO | None = None, line: str | None = None) -> None:
        if SYNC_WARNING_TEXT not in str(message):
            self._prev_show(message, category, filename, lineno, file, line)
            return
        self.sites[_user_site(filename, lineno)] += 1

    def findings(self, options: CheckOptions) -> list[Finding]:
        steps = max(self.steps, 1)
        check = runtime_check("GP630")
        out = []
        for (file, line, func), count in self.sites.most_common():
            per_step = count / steps
            if per_step < options.sync_min_per_step:
                continue
            logs = is_logging_line(linecache.getline(file, line))
            out.append(Finding(
                code="GP630", name=check.name, severity=check.severity,
                message=f"{'logging at ' if logs else ''}{file}:{line} synchronises the host with the GPU "
                        f"{per_step:g} times per step ({count} in {self.steps} recorded steps)",
                advice=_LOGGING_ADVICE if logs else _ADVICE,
                evidence=(Evidence("syncs_per_step", round(per_step, 3), options.sync_min_per_step, "syncs",
                                   extra={"count": count, "recorded_steps": self.steps, "logging": logs}),),
                location=SourceLocation(file, line, func or None),
                origin="runtime", source=f"{file}:{line}",
            ))
        return out


def _user_site(filename: str, lineno: int) -> tuple[str, int, str]:
    """The innermost user frame (:func:`gpuprof.frames.user_frame`); else the warning's own location."""
    f = user_frame(3)  # past this function and the locator's showwarning hook
    return (f.f_code.co_filename, f.f_lineno, f.f_code.co_name) if f is not None else (filename, lineno, "")
