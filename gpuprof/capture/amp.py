"""Mixed-precision mistakes PyTorch only warns about (GP850, GP851).

PyTorch tells these once, in a warning easily lost in a training log:

* the deprecated spellings ``torch.cuda.amp.autocast``, ``torch.cpu.amp.autocast``
  and ``torch.cuda.amp.GradScaler`` (FutureWarning; they still work where the
  device exists) -> GP850;
* autocast or GradScaler asked for a device this machine lacks: PyTorch
  *disables* them ("CUDA is not available ... Disabling autocast"), so the
  run trains in FP32 without a GradScaler while the code says mixed
  precision -> GP851.

While the capture runs, :class:`AmpWarningWatcher` sees every warning shown
(it wraps ``warnings.showwarning`` and passes every warning on unchanged: the
user still sees it) and keeps those, attributed to the user's source line.
A warning the user's filters ignore, or shown before the capture started,
is not seen.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from gpuprof.findings import Evidence, Finding, SourceLocation
from gpuprof.frames import user_frame
from gpuprof.runtimecodes import runtime_check

__all__ = ["AmpWarningWatcher", "AmpEvent", "classify_amp_warning"]

_DEPRECATED = re.compile(r"`(torch\.(?:cuda|cpu)\.amp\.(?:autocast|GradScaler))\(args\.\.\.\)` is deprecated\. "
                         r"Please use `([^`]+)` instead")
_AUTOCAST_OFF = (
    (re.compile(r"CUDA is not available(?: or torch_xla is imported)?\. Disabling autocast"), "autocast", "cuda"),
    (re.compile(r"User provided device_type of '(\w+)', but .*not available\. Disabling"), "autocast", None),
    (re.compile(r"(?:torch\.cuda\.amp\.)?GradScaler is enabled, but CUDA is not available\.\s+Disabling"),
     "GradScaler", "cuda"),
)


@dataclass(frozen=True)
class AmpEvent:
    """One mixed-precision warning: ``kind`` is "deprecated" or "disabled"."""

    kind: str
    what: str  # torch.cuda.amp.autocast, autocast, GradScaler
    detail: str  # the replacement spelling, or the missing device
    location: SourceLocation | None


def classify_amp_warning(text: str) -> tuple[str, str, str] | None:
    """(kind, what, detail) of a PyTorch mixed-precision warning text, else None."""
    m = _DEPRECATED.search(text)
    if m:
        return ("deprecated", m.group(1), m.group(2))
    for rx, what, device in _AUTOCAST_OFF:
        m = rx.search(text)
        if m:
            return ("disabled", what, device or m.group(1))
    return None


def _user_location() -> SourceLocation | None:
    """The user's line that made PyTorch warn (:func:`gpuprof.frames.user_frame`, past torch and warnings)."""
    f = user_frame(2)
    return SourceLocation(f.f_code.co_filename, f.f_lineno, f.f_code.co_name) if f is not None else None


class AmpWarningWatcher:
    """Keeps PyTorch's mixed-precision warnings while installed (see the module docstring)."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, str, str, str | None, int | None], AmpEvent] = {}
        self.errors: list[str] = []
        self.installed = False
        self._prev_show: Callable[..., None] = warnings.showwarning  # set again by install()

    def install(self) -> None:
        if self.installed:
            return
        self._prev_show = warnings.showwarning
        warnings.showwarning = self._show
        self.installed = True

    def uninstall(self) -> None:
        if not self.installed:
            return
        self.installed = False
        if warnings.showwarning is self._show:  # the user may have replaced it meanwhile
            warnings.showwarning = self._prev_show

    def _show(self, message: Warning | str, category: type[Warning], filename: str, lineno: int,
              file: TextIO | None = None, line: str | None = None) -> None:
        try:
            if "amp" in str(message) or "autocast" in str(message) or "GradScaler" in str(message):
                found = classify_amp_warning(str(message))
                if found is not None:
                    loc = _user_location()
                    key = (*found, loc.file if loc else None, loc.line if loc else None)
                    self.events.setdefault(key, AmpEvent(*found, loc))
        except Exception as err:  # noqa: BLE001 - never in the way of the user's warning
            self.errors.append(f"{type(err).__name__}: {err}")
        self._prev_show(message, category, filename, lineno, file, line)

    def findings(self) -> list[Finding]:
        out: list[Finding] = []
        for ev in self.events.values():
            where = f" at {ev.location.file}:{ev.location.line}" if ev.location else ""
            if ev.kind == "deprecated":
                check = runtime_check("GP850")
                out.append(Finding(
                    code="GP850", name=check.name, severity=check.severity,
                    message=f"deprecated mixed-precision spelling {ev.what}(...){where}; use {ev.detail}",
                    advice=(f"Write {ev.detail} (torch.amp names the device explicitly). The old "
                            "torch.cuda.amp spellings switch themselves off on a machine without CUDA, so the "
                            "same script silently trains in FP32 there, and they will be removed."),
                    evidence=(Evidence("deprecated_call", ev.what, None, "", extra={"replacement": ev.detail}),),
                    location=ev.location, origin="runtime",
                    source=f"{ev.location.file}:{ev.location.line}" if ev.location else ev.what,
                ))
            else:
                check = runtime_check("GP851")
                out.append(Finding(
                    code="GP851", name=check.name, severity=check.severity,
                    message=(f"{ev.what} for device '{ev.detail}'{where} is disabled: this machine has no "
                             f"{ev.detail}, so the step runs in FP32" + (" without loss scaling" if
                                                                          ev.what == "GradScaler" else "")),
                    advice=("Pick the device the tensors are on: torch.autocast(device_type=x.device.type, "
                            "dtype=torch.bfloat16) and torch.amp.GradScaler(x.device.type, enabled=(dtype is "
                            "torch.float16)); on a CPU, bfloat16 autocast is the mixed precision that exists."),
                    evidence=(Evidence("disabled", ev.what, None, "", extra={"device": ev.detail}),),
                    location=ev.location, origin="runtime",
                    source=f"{ev.location.file}:{ev.location.line}" if ev.location else ev.what,
                ))
        return out
