"""Device placement checks (GP610-GP613) and the enriched device-mismatch error.

Before the first step completes, a global forward pre-hook (removed after
step 0, so later steps pay nothing) looks at every module the step calls:
are its own parameters and buffers on one device, and are the tensors it
receives on that device too? When PyTorch raises its device-mismatch error
inside the wrapped step anyway, :func:`enrich_device_error` walks the
traceback to the module that raised it and re-raises a
:class:`DeviceMismatchError` (a ``RuntimeError``; the original is chained)
naming the module path, the parameter or buffer, its shape and device.
"""

from __future__ import annotations

import sys
import traceback
import weakref
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Iterable, Iterator

from gpuprof.capture.guard import safe_text
from gpuprof.findings import Evidence, Finding, SourceLocation
from gpuprof.frames import is_user_file, user_frame
from gpuprof.runtimecodes import runtime_check

__all__ = [
    "DeviceMismatchError",
    "PlacementMonitor",
    "module_findings",
    "is_device_error",
    "enrich_device_error",
    "placement_from_traceback",
]

# How PyTorch words a device mismatch, across versions and ops.
_DEVICE_ERROR_PATTERNS = (
    "Expected all tensors to be on the same device",
    "is not on the expected device",
    "Expected object of device type",
    "should be the same or input should be a MKLDNN tensor and weight is a dense tensor",
    "Input type (torch.cuda",
    "Input type (torch.FloatTensor) and weight type (torch.cuda",
    "must be on the same device",
    "found at least two devices",
)


class DeviceMismatchError(RuntimeError):
    """PyTorch's device-mismatch error, with the module, parameter, shape and device named."""


def _tensor_type() -> Any:
    import torch

    return torch.Tensor


def _module_type() -> Any:
    import torch.nn

    return torch.nn.Module


def _shape(t: Any) -> str:
    return "(" + ", ".join(str(int(d)) for d in t.shape) + ")" if t.dim() != 1 else f"({int(t.shape[0])},)"


def _own_tensors(module: Any) -> Iterator[tuple[str, str, Any]]:
    """(kind, name, tensor) of a module's own parameters and buffers (not its children's)."""
    for name, p in module.named_parameters(recurse=False):
        yield "parameter", name, p
    for name, b in module.named_buffers(recurse=False):
        if b is not None:
            yield "buffer", name, b


@dataclass(frozen=True)
class InputMismatch:
    """A module called with a tensor on another device than its own parameters."""

    module: Any  # weakref to the module
    module_type: str
    arg: str
    arg_shape: str
    arg_device: str
    param_kind: str
    param_name: str
    param_shape: str
    param_device: str
    location: SourceLocation | None


def _user_location() -> SourceLocation | None:
    """The innermost user frame (:func:`gpuprof.frames.user_frame`): the user's line."""
    f = user_frame(2)
    return SourceLocation(f.f_code.co_filename, f.f_lineno, f.f_code.co_name) if f is not None else None


class PlacementMonitor:
    """Watches the modules of the first step (see the module docstring)."""

    def __init__(self, max_modules: int) -> None:
        self.max_modules = max_modules
        self.called: dict[int, Any] = {}  # id -> weakref, in call order
        self.mismatches: list[InputMismatch] = []
        self.watched: dict[int, Any] = {}  # roots given by the user
        self._handle: Any = None
        self._compile_callback: Any = None  # registered with torch._dynamo.callback while hooked
        self._seen_pairs: set[tuple[int, str]] = set()
        # why the global hook is not (or no longer) installed: "torch.compile" when Dynamo is in use
        self.unhooked_for: str | None = None

    def watch(self, modules: Iterable[Any]) -> None:
        Module = _module_type()
        for m in modules:
            if isinstance(m, Module):
                self.watched[id(m)] = weakref.ref(m)

    def install(self) -> None:
        if dynamo_in_use():
            self.unhooked_for = "torch.compile"
            return
        from torch.nn.modules.module import register_module_forward_pre_hook

        self._handle = register_module_forward_pre_hook(self._pre_hook)
        self._watch_compiles()

    def uninstall(self) -> None:
        self._remove_hook()
        cb, self._compile_callback = self._compile_callback, None
        if cb is not None:
            from torch._dynamo.callback import callback_handler

            if cb in callback_handler.start_callbacks:
                callback_handler.remove_start_callback(cb)

    def _remove_hook(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _watch_compiles(self) -> None:
        """Register the compile-start callback, once torch._dynamo is imported (importing it costs ~1 s)."""
        if self._compile_callback is not None or "torch._dynamo" not in sys.modules:
            return
        from torch._dynamo.callback import callback_handler

        self._compile_callback = callback_handler.register_start_callback(self._on_compile_start)

    def _on_compile_start(self, args: Any) -> None:
        # Runs inside Dynamo before it traces: drop the hook so the compiled frame never guards on it.
        # Only the hook goes here: removing this callback now would skip the next one in Dynamo's list.
        try:
            if self._handle is not None:
                self.unhooked_for = "torch.compile"
            self._remove_hook()
        except Exception:  # noqa: BLE001 - must not fail the user's compilation; the step-0 uninstall retries
            return

    def _pre_hook(self, module: Any, args: tuple[Any, ...]) -> None:
        if self._compile_callback is None and "torch._dynamo" in sys.modules:
            self._watch_compiles()  # torch._dynamo was imported during the step (torch.compile, an optimizer)
        self.check_call(module, args, None)

    def check_call(self, module: Any, args: tuple[Any, ...], location: SourceLocation | None) -> None:
        """One call of ``module`` with ``args``: remember the module; an input on another device than its own
        tensors is a mismatch, placed at ``location`` (None: the user's line now)."""
        key = id(module)
        if key not in self.called:
            if len(self.called) >= self.max_modules:
                return
            self.called[key] = weakref.ref(module)
        own = list(_own_tensors(module))
        if not own:
            return
        devices = {t.device for _, _, t in own}
        if len(devices) != 1:
            return  # split module: reported by module_findings
        kind, pname, ptensor = own[0]
        Tensor = _tensor_type()
        for i, a in enumerate(args):
            if isinstance(a, Tensor) and a.device != ptensor.device:
                pair = (key, str(a.device))
                if pair in self._seen_pairs:
                    continue
                self._seen_pairs.add(pair)
                self.mismatches.append(InputMismatch(
                    module=weakref.ref(module), module_type=type(module).__name__, arg=f"input {i}",
                    arg_shape=_shape(a), arg_device=str(a.device), param_kind=kind, param_name=pname,
                    param_shape=_shape(ptensor), param_device=str(ptensor.device),
                    location=location if location is not None else _user_location(),
                ))

    def adopt(self, other: "PlacementMonitor") -> None:
        """Take what ``other`` saw (its modules and mismatches) as this monitor's own: ``gpuprof run`` watches
        the modules before the first optimizer step, then hands them to the capture an early error starts."""
        self.called.update(other.called)
        self.watched.update(other.watched)
        for mm in other.mismatches:
            pair = (id(mm.module()), mm.arg_device)
            if pair not in self._seen_pairs:
                self._seen_pairs.add(pair)
                self.mismatches.append(mm)

    def roots(self) -> list[Any]:
        """Modules not contained in another known module: the user's models."""
        mods = [r() for r in list(self.watched.values()) + list(self.called.values())]
        mods = [m for m in mods if m is not None]
        unique: dict[int, Any] = {id(m): m for m in mods}
        inner: set[int] = set()
        for m in unique.values():
            for _, child in m.named_modules():
                if child is not m:
                    inner.add(id(child))
        return [m for k, m in unique.items() if k not in inner]

    def findings(self) -> list[Finding]:
        roots = self.roots()
        out = module_findings(roots)
        for mm in self.mismatches:
            mod = mm.module()
            path = _module_path(mod, roots) if mod is not None else mm.module_type
            check = runtime_check("GP612")
            out.append(Finding(
                code="GP612",
                name=check.name,
                severity=check.severity,
                message=(f"module `{path}` ({mm.module_type}) has {mm.param_kind} `{mm.param_name}` "
                         f"{mm.param_shape} on {mm.param_device} but received {mm.arg} {mm.arg_shape} "
                         f"on {mm.arg_device}"),
                advice=(f"Move the batch to the model's device before the forward pass "
                        f"(x = x.to('{mm.param_device}', non_blocking=True)), or the model to the data's "
                        "device with model.to(device)."),
                evidence=(Evidence("input_device", mm.arg_device, None, "",
                                   extra={"module": path, "param": mm.param_name, "param_device": mm.param_device,
                                          "param_shape": mm.param_shape, "input_shape": mm.arg_shape}),),
                location=mm.location,
                origin="runtime",
                source=path,
            ))
        return out


def dynamo_in_use() -> bool:
    """True when ``torch.compile`` (or ``torch._dynamo.optimize``) was called in this process.

    Dynamo keeps every backend it was given in ``eval_frame.cached_backends``
    (so that ``torch._dynamo.reset()`` can reset them); ``torch._dynamo.disable``
    (used by the optimizers) registers ``None`` there, which does not count.
    """
    if "torch._dynamo" not in sys.modules:
        return False  # nothing was compiled: torch.compile imports torch._dynamo
    from torch._dynamo import eval_frame

    backends = getattr(eval_frame, "cached_backends", None)
    if not isinstance(backends, dict):
        return True  # another torch: assume compile may be in use rather than risk a recompilation
    return any(b is not None for b in list(backends.values()))


def _module_path(module: Any, roots: list[Any]) -> str:
    for root in roots:
        for name, m in root.named_modules():
            if m is module:
                return f"{type(root).__name__}.{name}" if name else type(root).__name__
    return type(module).__name__


def module_findings(roots: list[Any]) -> list[Finding]:
    """GP610 (one module split over devices) and GP611 (a model mixing CPU and accelerators)."""
    out: list[Finding] = []
    for root in roots:
        rname = type(root).__name__
        by_device: dict[str, list[str]] = {}
        for mname, m in root.named_modules():
            own = list(_own_tensors(m))
            for _kind, name, t in own:
                by_device.setdefault(str(t.device), []).append(f"{mname + '.' if mname else ''}{name}")
            devices = sorted({str(t.device) for _, _, t in own})
            if len(devices) > 1:
                detail = ", ".join(f"{kind} `{name}` {_shape(t)} on {t.device}" for kind, name, t in own)
                check = runtime_check("GP610")
                path = f"{rname}.{mname}" if mname else rname
                out.append(Finding(
                    code="GP610", name=check.name, severity=check.severity,
                    message=f"module `{path}` ({type(m).__name__}) has tensors on {len(devices)} devices: {detail}",
                    advice="Move the whole module at once with module.to(device) after creating or loading "
                           "all of its parameters and buffers (buffers registered later must be moved too).",
                    evidence=(Evidence("devices", ", ".join(devices), 1, "devices"),),
                    origin="runtime", source=path,
                ))
        kinds = {d.split(":")[0] for d in by_device if d != "meta"}
        if "cpu" in kinds and len(kinds) > 1:
            cpu_names = by_device.get("cpu", [])
            other = {d: v for d, v in by_device.items() if d != "cpu"}
            check = runtime_check("GP611")
            shown = ", ".join(f"`{n}`" for n in cpu_names[:5]) + (" ..." if len(cpu_names) > 5 else "")
            out.append(Finding(
                code="GP611", name=check.name, severity=check.severity,
                message=(f"model `{rname}` keeps {len(cpu_names)} tensors on cpu ({shown}) while "
                         f"{sum(len(v) for v in other.values())} are on {', '.join(sorted(other))}"),
                advice="Call model.to(device) after the model is fully built (submodules added later stay "
                       "where they were created); if CPU offload is intended, ignore GP611.",
                evidence=(Evidence("cpu_tensors", len(cpu_names), 0, "tensors",
                                   extra={"devices": {d: len(v) for d, v in by_device.items()}}),),
                origin="runtime", source=rname,
            ))
    return out


# ---------------------------------------------------------------------- the error


def is_device_error(err: BaseException) -> bool:
    if not isinstance(err, RuntimeError) or isinstance(err, DeviceMismatchError):
        return False
    text = safe_text(err, 10_000)  # the user's error: its __str__ may raise
    return any(p in text for p in _DEVICE_ERROR_PATTERNS)


def _frames(tb: TracebackType | None) -> list[Any]:
    return [f for f, _ in traceback.walk_tb(tb)]


def _innermost_user(frames: list[Any]) -> tuple[Any, SourceLocation | None]:
    """The innermost of a traceback's ``frames`` in the user's code, and its line ((None, None): none is)."""
    f = next((f for f in reversed(frames) if is_user_file(f.f_code.co_filename)), None)
    return (f, SourceLocation(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)) if f is not None else (None, None)


def placement_from_traceback(err: BaseException, max_modules: int = 4096) -> PlacementMonitor:
    """What the step-0 placement check would have seen of the modules an error's traceback passes through.

    ``gpuprof run`` has no hook before the first optimizer step (the user's tracebacks stay as Python prints
    them); when an error ends the script there, each module frame of the traceback (outermost first) is given
    to the same check as the forward pre-hook, with the tensors its ``forward`` holds (its inputs, unless the
    forward rebound them) and the user's line of the traceback as the place. The monitor's roots are the
    outermost modules, so the findings name ``Net.encoder.0`` as the decorator's do.
    """
    monitor = PlacementMonitor(max_modules)
    Module = _module_type()
    Tensor = _tensor_type()
    frames = _frames(err.__traceback__)
    _, loc = _innermost_user(frames)
    for f in frames:  # torch's call wrappers hold the call's ``args`` tuple, forward its named inputs
        module = f.f_locals.get("self")
        if not isinstance(module, Module):
            continue
        args: list[Any] = []
        for name, v in f.f_locals.items():
            if name == "self":
                continue
            if isinstance(v, Tensor):
                args.append(v)
            elif isinstance(v, (tuple, list)):
                args += [x for x in v[:8] if isinstance(x, Tensor)]
        monitor.check_call(module, tuple(args), loc)  # each (module, device) pair once
    return monitor


def enrich_device_error(err: RuntimeError, known_roots: list[Any]) -> tuple[DeviceMismatchError, Finding]:
    """The :class:`DeviceMismatchError` to raise ``from err``, and its GP613 finding."""
    Module = _module_type()
    Tensor = _tensor_type()
    frames = _frames(err.__traceback__)
    module_frames = [f for f in frames if isinstance(f.f_locals.get("self"), Module)]
    uf, loc = _innermost_user(frames)
    lines: list[str] = []
    extra: dict[str, Any] = {}
    path = None
    if module_frames:
        inner = module_frames[-1]
        module = inner.f_locals["self"]
        roots = list(known_roots) + [module_frames[0].f_locals["self"]]
        path = _module_path(module, roots)
        own = list(_own_tensors(module))
        inputs = [(name, v) for name, v in inner.f_locals.items() if isinstance(v, Tensor) and name != "self"]
        for name, v in inner.f_locals.items():
            if isinstance(v, (tuple, list)) and name != "self":
                inputs += [(f"{name}[{i}]", x) for i, x in enumerate(v[:8]) if isinstance(x, Tensor)]
        own_ids = {id(t) for _, _, t in own}
        inputs = [(n, t) for n, t in inputs if id(t) not in own_ids]
        lines.append(f"gpuprof: raised in module `{path}` ({type(module).__name__}).")
        in_devices = {str(t.device) for _, t in inputs}
        for kind, name, t in own:
            odd = " <- differs from the input" if in_devices and str(t.device) not in in_devices else ""
            lines.append(f"  {kind} `{name}` shape {_shape(t)} on {t.device}{odd}")
        for name, t in inputs:
            lines.append(f"  input `{name}` shape {_shape(t)} on {t.device}")
        extra = {"module": path,
                 "tensors": {f"{k}:{n}": f"{_shape(t)} {t.device}" for k, n, t in own},
                 "inputs": {n: f"{_shape(t)} {t.device}" for n, t in inputs}}
    elif uf is not None:
        tensors = [(n, v) for n, v in uf.f_locals.items() if isinstance(v, Tensor)]
        lines.append(f"gpuprof: raised at {loc}; tensors there:")
        for n, t in tensors[:12]:
            lines.append(f"  `{n}` shape {_shape(t)} on {t.device}")
        extra = {"tensors": {n: f"{_shape(t)} {t.device}" for n, t in tensors[:12]}}
    lines.append("  Fix: move the inputs to the module's device (x.to(device)) or the module to the data's "
                 "device (model.to(device)).")
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    message = first + "\n" + "\n".join(lines)
    check = runtime_check("GP613")
    finding = Finding(
        code="GP613", name=check.name, severity=check.severity,
        message="the step raised a device-mismatch error" + (f" in module `{path}`" if path else "")
                + f": {first}",
        advice="Move the inputs to the module's device or the module to the inputs' device; gpuprof's "
               "message lists every tensor involved with its shape and device.",
        evidence=(Evidence("error", first, None, "", extra=extra),),
        location=loc, origin="runtime", source=path,
    )
    return DeviceMismatchError(message), finding
