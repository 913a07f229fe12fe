"""OOM forensics (issue 34): allocator history in a bounded ring from the start, and at an out-of-memory error a
snapshot and a verdict (``oom.pickle``, ``oom.json``, ``oom.md``) next to the run's report, before the user's
exception continues unchanged. Split from :mod:`gpuprof.capture.memory` (the per-step samples and the growth check).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from gpuprof.atomic import atomic_write
from gpuprof.findings import Evidence, Finding
from gpuprof.memory.snapshot import dump_snapshot
from gpuprof.render.safe import visible
from gpuprof.runtimecodes import runtime_check

if TYPE_CHECKING:  # pragma: no cover - annotations only
    pass

__all__ = ["HistoryRecorder", "OOMObserver", "oom_finding", "oom_verdict", "verdict_markdown", "start_forensics", "stop_forensics", "FORENSICS_MAX_ENTRIES", "memory_sections", "oom_message_facts"]


# OOM forensics: allocator history kept from the start in a bounded ring, so the snapshot written at an
# out-of-memory error says what filled the device. Cost: torch records each allocation and free in a ring of
# FORENSICS_MAX_ENTRIES entries (host memory: a few hundred bytes an entry, stacks shared) and captures the Python
# stack of each allocation (stacks="python", context="alloc": no C++ unwinding, no stacks for frees); gpuprof has
# not measured the per-allocation cost on a GPU in this version. Off with oom_forensics=False.
FORENSICS_MAX_ENTRIES = 20_000


def start_forensics(max_entries: int) -> bool:
    """Record allocator history in a ring of ``max_entries`` entries (Python stacks of allocations only)."""
    import torch

    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                             max_entries=max_entries)
    return True


def stop_forensics() -> None:
    import torch

    torch.cuda.memory._record_memory_history(enabled=None)


class HistoryRecorder:
    """``torch.cuda.memory._record_memory_history`` around recorded steps; snapshots as pickle protocol 4.

    ``resume``: called instead of turning history off after a recorded window (the OOM-forensics ring goes
    on recording between windows).
    """

    def __init__(self, max_entries: int, resume: Callable[[], None] | None = None) -> None:
        self.max_entries = max_entries
        self.recording = False
        self.snapshots: list[Path] = []
        self.resume = resume

    def start(self) -> None:
        import torch

        torch.cuda.memory._record_memory_history(max_entries=self.max_entries)
        self.recording = True

    def dump(self, path: Path) -> None:
        """Write the snapshot (also stops recording)."""
        import torch

        try:
            dump_snapshot(with_device_facts(torch.cuda.memory._snapshot()), path)
            self.snapshots.append(path)
        finally:
            self.stop()

    def stop(self) -> None:
        if self.recording:
            import torch

            self.recording = False
            if self.resume is not None:
                self.resume()
            else:
                torch.cuda.memory._record_memory_history(enabled=None)


def with_device_facts(snap: Any) -> Any:
    """The snapshot with the current device's name, total and free bytes (``"gpuprof"`` key), so the analysis
    can judge capacity and say how much memory is not PyTorch's; the snapshot unchanged if they cannot be read."""
    import torch

    if not isinstance(snap, dict):
        return snap
    try:
        i = torch.cuda.current_device()
        free, total = torch.cuda.mem_get_info(i)
        dev = {"id": i, "name": torch.cuda.get_device_name(i), "total_memory": int(total), "free_memory": int(free)}
    except Exception:  # noqa: BLE001 - facts are a bonus; the snapshot is what matters
        return snap
    return dict(snap, gpuprof={"devices": [dev]})


def _cuda_facts() -> tuple[Callable[[], Any], Callable[[], dict[str, Any]], Callable[[int], dict[str, Any]]]:
    """torch's snapshot, memory_stats and per-device facts (name, total and free bytes)."""
    import torch

    def device(i: int) -> dict[str, Any]:
        free, total = torch.cuda.mem_get_info(i)
        return {"id": i, "name": torch.cuda.get_device_name(i), "total_memory": int(total), "free_memory": int(free)}

    return torch.cuda.memory._snapshot, torch.cuda.memory_stats, device


class OOMObserver:
    """On a CUDA out-of-memory error: the snapshot (``oom.pickle``) and the verdict (``oom.json``, ``oom.md``).

    Uses ``torch._C._cuda_attach_out_of_memory_observer`` (called by the
    allocator before it raises); the exception then propagates as usual.
    Observers cannot be detached, so a finished capture leaves an inert one.
    ``facts``: where the snapshot, ``memory_stats()`` and the device facts come
    from (torch's by default; tests give recorded ones).
    """

    def __init__(self, files: Callable[[int], tuple[Path, Path]], stream: Any = None,
                 facts: tuple[Callable[[], Any], Callable[[], dict[str, Any]], Callable[[int], dict[str, Any]]]
                 | None = None, owners: Callable[[], list[dict[str, Any]]] | None = None) -> None:
        self._files = files
        self._owners = owners  # the run's parameter/gradient/optimizer-state storages (gpuprof.capture.owners)
        self._stream = stream
        self._facts = facts
        self.active = False
        self.dumped: list[tuple[Path, Path]] = []
        self.attached = False

    def attach(self) -> bool:
        import torch

        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            return False
        attach(self._observe)
        self.attached = True
        self.active = True
        return True

    def _observe(self, device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        if not self.active:
            return
        try:
            self.dump(extra={"device": device, "requested_bytes": alloc,
                             "device_allocated_bytes": device_allocated, "device_free_bytes": device_free})
        except Exception as err:  # noqa: BLE001 - the OOM itself must still propagate
            print(visible(f"gpuprof: could not dump the out-of-memory snapshot: {type(err).__name__}: {err}"),
                  file=self._stream or sys.stderr)

    def dump(self, extra: dict[str, Any] | None = None) -> tuple[Path, Path]:
        """Write the snapshot and the verdict now; print one line naming them."""
        snapshot_fn, stats_fn, device_fn = self._facts or _cuda_facts()
        snap_path, verdict_path = self._files(len(self.dumped))
        extra = dict(extra or {})
        snap = snapshot_fn()
        meta: dict[str, Any] = {}
        dev = extra.get("device")
        if isinstance(snap, dict) and isinstance(dev, int):
            try:
                meta["devices"] = [device_fn(dev)]
            except Exception as err:  # noqa: BLE001 - the facts are a bonus; the snapshot is what matters
                meta["device_facts_error"] = type(err).__name__
            try:
                hs = _host_pinned()
                if hs:
                    meta["host_pinned"] = hs
            except Exception as err:  # noqa: BLE001 - older torch has no host allocator statistics
                meta["host_pinned_error"] = type(err).__name__
            if self._owners is not None:
                try:
                    meta["tensors"] = self._owners()
                except Exception as err:  # noqa: BLE001 - the stacks still attribute what they can
                    meta["tensors_error"] = type(err).__name__
            if "requested_bytes" in extra:
                meta["oom"] = {"device": dev, "requested_bytes": extra["requested_bytes"],
                               "device_free_bytes": extra.get("device_free_bytes")}
            snap = dict(snap, gpuprof=meta)
        dump_snapshot(snap, snap_path)
        self.dumped.append((snap_path, verdict_path))
        try:
            stats = stats_fn()
        except Exception:  # noqa: BLE001
            stats = {}
        try:
            verdict = oom_verdict(snap, snap_path, extra, stats)
        except Exception as err:  # noqa: BLE001 - the snapshot is written; say why the verdict is not
            verdict = {"snapshot": snap_path.name, "error": f"{type(err).__name__}: {err}", "memory_stats": stats,
                       **extra}
        atomic_write(verdict_path, json.dumps(verdict, indent=1, default=str))
        atomic_write(verdict_path.with_suffix(".md"), verdict_markdown(verdict))
        print(visible(f"gpuprof: CUDA out of memory: snapshot {snap_path}, verdict {verdict_path} and "
                      f"{verdict_path.with_suffix('.md').name} (inspect with: gpuprof memory {snap_path})"),
              file=self._stream or sys.stderr)
        return snap_path, verdict_path


_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_TRIED = re.compile(r"Tried to allocate (\d+(?:\.\d+)?) (B|KiB|MiB|GiB|TiB)")
_GPU_FREE = re.compile(r"GPU (\d+) has a total capacity of (\d+(?:\.\d+)?) (B|KiB|MiB|GiB|TiB) of which "
                       r"(\d+(?:\.\d+)?) (B|KiB|MiB|GiB|TiB) is free")


def oom_message_facts(text: str) -> dict[str, Any]:
    """What PyTorch's out-of-memory message says (``Tried to allocate 2.00 GiB. GPU 0 has a total capacity of
    79.14 GiB of which 1.05 GiB is free``), for the verdict when no observer ran: the request, the device and
    its free bytes, to the message's precision (two decimals)."""
    out: dict[str, Any] = {}
    m = _TRIED.search(text)
    if m:
        out["requested_bytes"] = int(float(m.group(1)) * _UNITS[m.group(2)])
    g = _GPU_FREE.search(text)
    if g:
        out["device"] = int(g.group(1))
        out["device_free_bytes"] = int(float(g.group(4)) * _UNITS[g.group(5)])
    return out


def _host_pinned() -> dict[str, int]:
    """Pinned host memory PyTorch's host allocator holds now (torch.cuda.host_memory_stats, newer torch)."""
    import torch

    stats = getattr(torch.cuda, "host_memory_stats", None)
    if stats is None:
        return {}
    s = stats()
    out = {k: int(s[f"{k}.current"]) for k in ("allocated_bytes", "active_bytes") if f"{k}.current" in s}
    return out


def oom_verdict(snap: Any, snap_path: Path, facts: dict[str, Any], stats: dict[str, Any]) -> dict[str, Any]:
    """What was requested, what was free, and where the memory was: categories, stages, modules, top holders
    and the fixes ranked by bytes, from gpuprof's own analysis of the snapshot (no file re-read)."""
    from gpuprof.memory.analysis import analyze_memory
    from gpuprof.memory.snapshot import parse_snapshot

    data = parse_snapshot(snap, str(snap_path))
    section, findings, _ = analyze_memory(data)
    want = f"cuda:{facts.get('device', 0)}"
    dev = next((d for d in section.devices if d["device"] == want), section.devices[0] if section.devices else {})
    at = dev["ooms"][0]["at_oom"] if dev.get("ooms") else {k: dev.get(k) for k in (
        "categories", "reserved_bytes", "allocated_bytes", "stages", "modules", "files")}
    return {
        "snapshot": snap_path.name,
        "device": dev.get("device", want),
        "requested_bytes": facts.get("requested_bytes"),
        "device_free_bytes": facts.get("device_free_bytes"),
        "device_allocated_bytes": facts.get("device_allocated_bytes"),
        "total_memory": dev.get("total_memory"),
        "categories": at.get("categories"),
        "reserved_bytes": at.get("reserved_bytes"),
        "allocated_bytes": at.get("allocated_bytes"),
        "stages": at.get("stages"),
        "modules": at.get("modules"),
        "top_holders": [{k: s.get(k) for k in ("site", "file", "line", "function", "bytes", "blocks")}
                        for s in ((dev["ooms"][0]["top_live_sites"] if dev.get("ooms") else dev.get("top_sites")) or [])],
        "fixes": dev.get("fixes", []),
        "pinned_host": section.pinned_host,
        "findings": [f.to_dict() for f in findings],
        "memory_stats": stats,
        **{k: v for k, v in facts.items() if k not in ("requested_bytes", "device_free_bytes",
                                                         "device_allocated_bytes", "device")},
    }


def verdict_markdown(v: dict[str, Any]) -> str:
    """``oom.md``: the verdict for people."""
    from gpuprof.memory.units import fmt_bytes
    from gpuprof.render.markdown import md_code, md_escape

    def b(x: Any) -> str:
        return fmt_bytes(x) if isinstance(x, int) else "unknown"

    lines = ["# CUDA out of memory", ""]
    if v.get("error"):
        lines += [f"The verdict could not be computed ({md_escape(v['error'])}); the snapshot is "
                  f"{md_code(v.get('snapshot', ''))}.", ""]
        return "\n".join(lines) + "\n"
    lines += [f"- device: {md_escape(str(v.get('device')))}",
              f"- requested: {b(v.get('requested_bytes'))}; free on the device: {b(v.get('device_free_bytes'))}",
              f"- reserved by PyTorch: {b(v.get('reserved_bytes'))}; allocated: {b(v.get('allocated_bytes'))}",
              f"- snapshot: {md_code(v.get('snapshot', ''))} (`gpuprof memory` it for the full view)", "",
              "## Where the memory was", "", "| category | bytes |", "|---|---|"]
    for k, x in (v.get("categories") or {}).items():
        if x:
            lines.append(f"| {md_escape(k.replace('_', ' '))} | {b(x)} |")
    if v.get("top_holders"):
        lines += ["", "## Top holders", "", "| site | bytes |", "|---|---|"]
        lines += [f"| {md_code(str(h.get('site')), cell=True)} | {b(h.get('bytes'))} |" for h in v["top_holders"][:10]]
    if v.get("fixes"):
        lines += ["", "## Fixes ranked by the bytes each saves", ""]
        lines += [f"{i}. {md_escape(f['what'])}: {b(f['saves_bytes'])}" for i, f in enumerate(v["fixes"], 1)]
    return "\n".join(lines) + "\n"


def oom_finding(files: list[tuple[Path, Path]], message: str) -> Finding:
    c = runtime_check("GP641")
    first = str(message).strip().splitlines()[0] if str(message).strip() else "CUDA out of memory"
    names = "; ".join(f"{s} and {j}" for s, j in files) or "no snapshot could be written"
    return Finding(
        code=c.code, name=c.name, severity=c.severity,
        message=f"the run hit CUDA out-of-memory ({first}); dumped {names}",
        advice=f"Run `gpuprof memory {files[0][0] if files else '<snapshot>'}` to see what held the memory at "
               "the moment of the OOM; then reduce the batch size, use activation checkpointing or mixed "
               "precision, or free tensors kept across steps.",
        evidence=(Evidence("oom_snapshots", len(files), None, "files",
                           extra={"files": [[str(s), str(j)] for s, j in files]}),),
        origin="runtime",
    )


_OOM_SNAPSHOT_NAME = re.compile(r"oom(\.\d+)?\.pickle")
MAX_SECTION_SNAPSHOTS = 2  # the last recorded window's snapshot and the first OOM dump: the report stays small


def memory_sections(snapshots: Sequence[str], files: Sequence[str]) -> tuple[list[Any], list[Finding]]:
    """The capture report's memory sections: the analysis (categories, stages, modules, holders) of the last
    recorded window's snapshot and of the first out-of-memory dump among ``files``, with the findings of the
    dump (GP512, which the run's GP641 is folded into)."""
    from gpuprof.memory.analysis import analyze_memory
    from gpuprof.memory.load import load_memory

    chosen: list[tuple[str, bool]] = [(snapshots[-1], False)] if snapshots else []
    oom = next((f for f in files if _OOM_SNAPSHOT_NAME.fullmatch(os.path.basename(f))), None)
    if oom is not None:
        chosen.append((oom, True))
    sections: list[Any] = []
    findings: list[Finding] = []
    for path, is_oom in chosen[:MAX_SECTION_SNAPSHOTS]:
        section, found, _ = analyze_memory(load_memory(path))
        sections.append(section)
        if is_oom:
            findings += [f for f in found if f.code == "GP512"]
    return sections, findings
