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
A warning shown before the capture started (a ``GradScaler`` built before
it, the usual place) is found where Python's ``warnings`` recorded it: each
module's ``__warningregistry__`` holds ``(text, category, line)`` for every
warning shown once per location (the default action), so the watcher reads
the loaded modules' registries when it installs (:func:`shown_before`) and
reports those warnings as if they had been shown inside, at the same line;
what an earlier capture of the process already saw is not reported again
(:func:`mark_shown`), so a line fixed since is not. A warning the user's
filters ignore, or shown under the ``always`` action before the capture (no
registry entry), is not seen.
"""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TextIO

from gpuprof.findings import Evidence, Finding, SourceLocation
from gpuprof.frames import is_user_file, user_frame
from gpuprof.runtimecodes import runtime_check

__all__ = ["AmpWarningWatcher", "AmpEvent", "classify_amp_warning", "mark_shown", "shown_before"]

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
    before: bool = False  # shown before the capture started (read from a warning registry)


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


# Registry entries (module name, key) already accounted for: seen when an earlier capture of this process
# ended (it reported them, or they predate it). A registry keeps an entry for the life of the process, so
# without this a warning fixed since (a notebook cell run again) would be reported by every later capture.
_KNOWN: set[tuple[str, tuple[object, ...]]] = set()
_MAX_KNOWN = 10_000


def _amp_entries(modules: Mapping[str, object]) -> list[tuple[str, tuple[str, object, int], str | None]]:
    """(module name, registry key, module file) of every mixed-precision warning in the modules' registries."""
    out = []
    for name, mod in list(modules.items()):
        registry = getattr(mod, "__dict__", {}).get("__warningregistry__")
        if not isinstance(registry, dict):
            continue
        file = getattr(mod, "__file__", None)
        for key in list(registry):
            # ("version") and the keys of other actions are not (text, category, line)
            if (isinstance(key, tuple) and len(key) == 3 and isinstance(key[0], str) and isinstance(key[2], int)
                    and ("amp" in key[0] or "autocast" in key[0] or "GradScaler" in key[0])
                    and classify_amp_warning(key[0]) is not None):
                out.append((name, key, file if isinstance(file, str) else None))
    return out


def shown_before(modules: Mapping[str, object] | None = None) -> list[AmpEvent]:
    """The mixed-precision warnings shown in this process since the last capture ended (or ever, before the
    first), from the ``__warningregistry__`` of each loaded module (``modules``: ``sys.modules``), located
    at the user's line.

    A warning whose recorded line is in a library (``torch.cuda.amp.GradScaler`` calls its parent's
    ``__init__``, whose "Disabling" warning names torch's own line) is placed at the user's line of a
    deprecated-spelling warning of the same construction (``torch.cuda.amp.GradScaler(...)``, recorded
    in the user's module), else left out: nothing ties it to this run's code.
    """
    found: list[tuple[tuple[str, str, str], SourceLocation | None]] = []
    for name, key, file in _amp_entries(sys.modules if modules is None else modules):
        if (name, key) in _KNOWN:
            continue
        kind = classify_amp_warning(key[0])
        if kind is not None:
            found.append((kind, SourceLocation(file, key[2], None) if file and is_user_file(file) else None))
    deprecated_at = {what.rsplit(".", 1)[-1]: loc for (kind, what, _), loc in found if kind == "deprecated" and loc}
    out = [AmpEvent(*kind, loc if loc is not None else deprecated_at.get(kind[1]), before=True) for kind, loc in found]
    return [ev for ev in out if ev.location is not None]


def mark_shown(modules: Mapping[str, object] | None = None) -> None:
    """Remember every mixed-precision warning recorded so far: a later capture reports only newer ones."""
    for name, key, _ in _amp_entries(sys.modules if modules is None else modules):
        if len(_KNOWN) < _MAX_KNOWN:
            _KNOWN.add((name, key))


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
        try:  # a scaler built (or autocast entered) before the capture warned before it: as if inside
            for ev in shown_before():
                loc = ev.location
                self.events.setdefault((ev.kind, ev.what, ev.detail, loc.file if loc else None,
                                        loc.line if loc else None), ev)
        except Exception as err:  # noqa: BLE001 - one part's failure, reported as such
            self.errors.append(f"{type(err).__name__}: {err}")

    def uninstall(self) -> None:
        if not self.installed:
            return
        self.installed = False
        try:
            mark_shown()
        except Exception as err:  # noqa: BLE001 - one part's failure, reported as such
            self.errors.append(f"{type(err).__name__}: {err}")
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
            if ev.before:
                where += " (warned before the capture started)"
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
