"""The ``gpuprof`` TensorBoard plugin: HTTP routes under ``/data/plugin/gpuprof/``.

TensorBoard finds it through the ``tensorboard_plugins`` entry point
(installed with ``pip install "gpuprof[tensorboard]"``) and opens its tab in
an iframe at ``data/plugin_entry.html?name=gpuprof``, a page whose
``<base href="plugin/gpuprof/">`` imports ``index.js``; that module sends the
frame on to ``index.html``. Every URL the page uses is relative to that, so
the plugin works under ``--path_prefix`` and loads nothing from anywhere but
the TensorBoard server.

Routes (all GET, all answers JSON unless said):

==============================  ===============================================
``index.js``                    the ES module TensorBoard imports
``index.html``                  the dashboard (HTML; script and style inline, allowed by hash)
``runs``                        ``{"runs": [...], "notes": [...]}``
``run?run=NAME``                ``{"status": "pending", "done": k, "total": n}`` or ``{"status": "ready", "view": ...}``
``compare?a=NAME&b=NAME``       the same with ``"compare"`` (see :func:`gpuprof.tbplugin.data.compare_views`)
``timeline?run=NAME&trace=F``   ``{"status": "ready", "timeline": ...}``: trace F's timeline (F as the run answer names it)
``timeline_ranks?run=NAME``     ``{"status": "ready", "timelines": [...]}``: each trace's collective lanes
``memory?run=NAME&i=K``         status of the K-th memory snapshot's viewer page
``memory.html?run=NAME&i=K``    that page (gpuprof's memory viewer, :mod:`gpuprof.memory.html`)
``history.html``                ``gpuprof history LOGDIR --html``'s page (no script), for the tab's History frame
==============================  ===============================================

The run answer carries no timeline, only each trace's ``timeline_ref``
(:mod:`gpuprof.tbplugin.timelines`): the page fetches one trace's timeline
when the user opens it, from the analysis the run answer came from (cached
once per file by the store).

Run names, trace names and snapshot indices are looked up among the runs found under
the logdir; a request never names a file path, so it cannot reach a file
outside the logdir. Nor can a file swapped after the run list was made: every
file is opened inside the logdir without following links, and only a regular
file is read (:mod:`gpuprof.tbplugin.safeopen`). The run list is kept by a
:class:`~gpuprof.tbplugin.runs.RunIndex` (walked again only when the logdir
changed, at a bounded rate), and each analysis has a time budget
(:class:`~gpuprof.tbplugin.store.Store`).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Callable, cast

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from gpuprof.memory.htmlsafe import script_json
from gpuprof.tbplugin import page
from gpuprof.tbplugin.data import analyse_trace_file, compare_views, rel_name, run_view
from gpuprof.tbplugin.errortext import client_error
from gpuprof.tbplugin.runs import Run, RunIndex, file_sig
from gpuprof.tbplugin.store import Result, Store

__all__ = ["GpuprofPlugin"]

from gpuprof.tbplugin import PLUGIN_NAME

_Request = wrappers.Request
_Response = wrappers.Response

# werkzeug types Request.application for plain functions (request) -> response; it works the same
# on these methods (it takes the request from the last argument), which its annotations cannot say.
_route = cast(Callable[[Callable[[Any, _Request], _Response]], Callable[..., Any]], _Request.application)
# tensorboard ships no type hints: Respond builds a werkzeug Response.
_respond = cast(Callable[..., _Response], http_util.Respond)


_NO_RUN = {"status": "missing", "error": "no such run under the logdir"}
_GONE = object()  # a listed trace that vanished since the walk


def _bare_hash(expr: str) -> str:
    """``'sha256-XXX'`` (a CSP source) as the bare base64 ``http_util.Respond`` wants."""
    return expr.strip("'").split("-", 1)[1]


class GpuprofPlugin(base_plugin.TBPlugin):  # type: ignore[misc]  # tensorboard ships no type hints
    """gpuprof's dashboard: runs, summary, per-step breakdown charts, findings, memory, ranks, comparison."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self._logdir = Path(context.logdir) if context.logdir else None
        self._index = RunIndex(self._logdir) if self._logdir is not None else None
        self._store = Store()

    # --- TensorBoard's side -------------------------------------------------------------------

    def get_plugin_apps(self) -> dict[str, Callable[..., Any]]:
        return {"/index.js": self._serve_js, "/index.html": self._serve_index, "/runs": self._serve_runs,
                "/run": self._serve_run, "/compare": self._serve_compare, "/timeline": self._serve_timeline,
                "/timeline_ranks": self._serve_timeline_ranks, "/memory": self._serve_memory_status,
                "/memory.html": self._serve_memory_page, "/history.html": self._serve_history_page}

    def is_active(self) -> bool:
        return bool(self._runs())

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="gpuprof", disable_reload=True)

    # --- routes ---------------------------------------------------------------------------------

    @_route
    def _serve_js(self, request: _Request) -> _Response:
        return _respond(request, page.ENTRY_MODULE, "application/javascript")

    @_route
    def _serve_index(self, request: _Request) -> _Response:
        # Respond adds TensorBoard's own policy header (script-src 'self' plus the hashes given here);
        # ours comes as a second header and in the page: a browser enforces every policy, so the strictest wins.
        return _respond(request, page.INDEX_HTML, "text/html",
                        csp_scripts_sha256s=[_bare_hash(h) for h in page.SCRIPT_HASHES],
                        headers=[("Content-Security-Policy", page.HEADER_POLICY),
                                 ("Referrer-Policy", "no-referrer")])

    @_route
    def _serve_runs(self, request: _Request) -> _Response:
        notes: list[str] = []
        runs = self._runs(notes)
        if self._logdir is None:
            notes.append("TensorBoard was started without --logdir: there is nothing to show")
        return self._json(request, {"runs": [r.summary() for r in runs], "notes": notes})

    @_route
    def _serve_run(self, request: _Request) -> _Response:
        run = self._run(request.args.get("run", ""))
        if run is None:
            return self._json(request, _NO_RUN, code=404)
        return self._json(request, self._view(run))

    @_route
    def _serve_compare(self, request: _Request) -> _Response:
        a, b = self._run(request.args.get("a", "")), self._run(request.args.get("b", ""))
        if a is None or b is None:
            return self._json(request, _NO_RUN, code=404)
        va, vb = self._view(a), self._view(b)
        if va["status"] != "ready" or vb["status"] != "ready":
            done = va.get("done", 0) + vb.get("done", 0)
            total = va.get("total", 0) + vb.get("total", 0)
            return self._json(request, {"status": "pending", "done": done, "total": total})
        return self._json(request, {"status": "ready", "compare": compare_views(va["view"], vb["view"])})

    @_route
    def _serve_timeline(self, request: _Request) -> _Response:
        """One trace's timeline (the report's ``traces[].timeline``), asked for when the page opens it."""
        run = self._run(request.args.get("run", ""))
        if run is None:
            return self._json(request, _NO_RUN, code=404)
        assert self._logdir is not None
        name = request.args.get("trace", "")
        # looked up among the run's listed traces by the name the run answer gives: never opened by it
        path = next((p for p in run.traces if rel_name(p, self._logdir) == name), None)
        found = self._analysis(path) if path is not None else _GONE
        if found is _GONE:
            return self._json(request, {"status": "missing", "error": "no such trace in the run"}, code=404)
        if not isinstance(found, Result):
            return self._json(request, {"status": "pending"})
        if found.error:
            return self._json(request, {"status": "error", "error": client_error(found.error, self._logdir)})
        return self._json(request, {"status": "ready", "timeline": found.value.get("timeline")})

    @_route
    def _serve_timeline_ranks(self, request: _Request) -> _Response:
        """The collective lanes of each trace of the run (those that have some), for "Collectives per rank"."""
        run = self._run(request.args.get("run", ""))
        if run is None:
            return self._json(request, _NO_RUN, code=404)
        found = [self._analysis(p) for p in run.traces]
        if any(r is None for r in found):
            done = sum(1 for r in found if r is not None)
            return self._json(request, {"status": "pending", "done": done, "total": len(found)})
        # a trace that failed or vanished is said in the run answer's errors; here it has no lanes
        timelines = [r.value.get("rank_timeline") for r in found if isinstance(r, Result) and r.error is None]
        return self._json(request, {"status": "ready", "timelines": [t for t in timelines if t is not None]})

    @_route
    def _serve_memory_status(self, request: _Request) -> _Response:
        found = self._snapshot(request)
        if found is None:
            return self._json(request, {"status": "missing", "error": "no such snapshot"}, code=404)
        res = self._memory(found)
        if res is None:
            return self._json(request, {"status": "pending"})
        if res.error:
            return self._json(request, {"status": "error", "error": client_error(res.error, self._logdir)})
        return self._json(request, {"status": "ready"})

    @_route
    def _serve_memory_page(self, request: _Request) -> _Response:
        from gpuprof.memory.html import inline_script_hashes

        found = self._snapshot(request)
        res = self._memory(found) if found is not None else None
        if res is None or res.error or not isinstance(res.value, str):
            return _respond(request, "not ready", "text/plain", code=404)
        return _respond(request, res.value, "text/html",
                        csp_scripts_sha256s=[_bare_hash(h) for h in inline_script_hashes()],
                        headers=[("Referrer-Policy", "no-referrer")])

    @_route
    def _serve_history_page(self, request: _Request) -> _Response:
        """The run history of the logdir's saved reports, the page ``gpuprof history --html`` writes (docs/history.md)."""
        from gpuprof.errors import InputError
        from gpuprof.history.html import history_page
        from gpuprof.history.render import history_dict
        from gpuprof.history.runs import read_history

        if self._logdir is None:
            return _respond(request, "TensorBoard was started without --logdir", "text/plain", code=404)
        try:
            doc = history_dict(read_history(os.fspath(self._logdir)))
        except InputError as err:
            return _respond(request, f"no run history: {err.problem}", "text/plain", code=404)
        return _respond(request, history_page(doc), "text/html", headers=[("Referrer-Policy", "no-referrer")])

    # --- helpers --------------------------------------------------------------------------------

    def _json(self, request: _Request, obj: Any, code: int = 200) -> _Response:
        # script_json: NaN/inf become null, and nothing in the text can be read as markup if misused.
        return _respond(request, script_json(obj), "application/json", code=code)

    def _runs(self, notes: list[str] | None = None) -> list[Run]:
        if self._index is None:
            return []
        runs, found = self._index.get()
        if notes is not None:
            notes += found
        return runs

    def _run(self, name: str) -> Run | None:
        return next((r for r in self._runs() if r.name == name), None)

    def _view(self, run: Run) -> dict[str, Any]:
        """The run's view when every trace is analysed, else how far the worker is."""
        results: dict[Path, dict[str, Any] | str] = {}
        for p in run.traces:
            res = self._analysis(p)
            if res is _GONE:
                continue  # vanished since the walk
            if isinstance(res, Result):
                results[p] = res.value if res.error is None else client_error(res.error, self._logdir)
        if len(results) < len(run.traces):
            return {"status": "pending", "done": len(results), "total": len(run.traces)}
        assert self._logdir is not None
        return {"status": "ready", "view": run_view(run, self._logdir, results)}

    def _analysis(self, path: Path) -> Result | object | None:
        """The trace's analysis (the store's one per file and signature), ``None`` while it runs, ``_GONE`` when
        the file vanished since the walk. The run answer and the timeline routes read the same entry."""
        sig = file_sig(path)
        if sig is None:
            return _GONE
        job = functools.partial(analyse_trace_file, path, self._logdir)
        return self._store.get(("trace", os.fspath(path)), sig, job)

    def _snapshot(self, request: _Request) -> Path | None:
        run = self._run(request.args.get("run", ""))
        try:
            i = int(request.args.get("i", "-1"))
        except ValueError:
            return None
        if run is None or not 0 <= i < len(run.snapshots):
            return None
        return run.snapshots[i]

    def _memory(self, path: Path) -> Any:
        sig = file_sig(path)
        logdir = self._logdir
        assert logdir is not None
        budget = self._store.budget_s
        return self._store.get(("memory", os.fspath(path)), sig, lambda: _memory_page(path, logdir, budget))


def _memory_page(path: Path, logdir: Path, budget_s: float) -> str:
    """gpuprof's memory viewer page for one snapshot (what ``gpuprof memory FILE --html`` writes).

    Built in a child process (:mod:`gpuprof.tbplugin.memchild`), which gets
    the file as a descriptor opened safely here: there the unpickler's memory
    is capped, and the child is killed past ``budget_s``.
    """
    import subprocess
    import sys

    from gpuprof.errors import InputError
    from gpuprof.tbplugin.safeopen import open_fd_in_logdir

    fd = open_fd_in_logdir(logdir, path)
    root = os.fspath(Path(__file__).resolve().parents[2])  # the folder holding this gpuprof package
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
    try:
        r = subprocess.run([sys.executable, "-m", "gpuprof.tbplugin.memchild", str(fd), os.fspath(path)],
                           pass_fds=(fd,), stdin=subprocess.DEVNULL, capture_output=True, timeout=budget_s, env=env)
    except subprocess.TimeoutExpired:
        raise InputError(path, f"the memory page took longer than {budget_s:g} s and was stopped "
                               "(set GPUPROF_TB_ANALYSIS_SECONDS to allow more)") from None
    finally:
        os.close(fd)
    if r.returncode != 0:
        lines = r.stderr.decode("utf-8", "replace").strip().splitlines()
        raise InputError(path, lines[-1].removeprefix(os.fspath(path) + ": ") if lines
                         else f"the memory page could not be built (exit {r.returncode})")
    return r.stdout.decode("utf-8")
