"""The gpuprof tab in a live TensorBoard, opened in headless Chromium with every request routed and recorded.

One TensorBoard (a subprocess on a free port, under ``--path_prefix``) serves
a logdir holding two captures made here with CPU torch (``before``: a
DataLoader with ``num_workers=0`` whose samples take time to build, so the
trace analysis reports GP102; ``after``: the batches built before the loop)
and a run whose directory name and trace names come from the hostile corpus
(tests/security/conftest.py). TensorBoard loads the plugin through the
``tensorboard_plugins`` entry point when gpuprof is installed, else through
tests/tbplugin/launch_tb.py (a worktree run).

Every request the browser makes is recorded, and any to another host is
aborted and fails the test.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Iterator

import pytest

from ..security.conftest import HTML_HOSTILE, HUGE_NAME
from ..security.views_dom import check_views

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (apt-get install -y chromium)")
PREFIX = "/tb-prefix"
# A run directory may not hold "/" or NUL: the hostile names that fit in one.
HOSTILE_DIR = next(n for n in HTML_HOSTILE if "/" not in n and "onfocus" in n)


def _capture(logdir: Path, run: str, slow_loader: bool) -> None:
    """A small CPU training loop under gpuprof capture (num_workers=0)."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    import gpuprof
    from gpuprof.capture import Schedule

    class Slow(Dataset):  # building a sample takes time, as decoding and augmenting do
        def __len__(self) -> int:
            return 8 * 32

        def __getitem__(self, i: int) -> tuple[Any, int]:
            time.sleep(0.0006)
            return torch.randn(64), i % 4

    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if slow_loader:
        batches: Any = DataLoader(Slow(), batch_size=32, num_workers=0)
    else:  # the fix: batches ready before the loop
        batches = [(torch.randn(32, 64), torch.randint(0, 4, (32,))) for _ in range(8)]
    with gpuprof.profile(str(logdir), run=run, schedule=Schedule(wait=1, warmup=1, active=4),
                         print_report=False) as prof:
        for x, y in batches:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()


def _hostile_run(logdir: Path) -> list[str]:
    from gpuprof_testing.tracegen import TraceBuilder

    names = HTML_HOSTILE + [HUGE_NAME[:5000]]
    b = TraceBuilder()
    for _ in range(2):
        with b.step():
            for i, name in enumerate(names):
                with b.op(name):
                    b.kernel(name, us=300 + (20 if name.startswith("aten::") else i))  # the huge name in the top 10
            b.cpu(us=100)
    d = logdir / HOSTILE_DIR
    d.mkdir()
    b.write(d / "w.pt.trace.json")
    return names


def _two_rank_job(logdir: Path) -> bool:
    """HTA's real NCCL rank trace as ranks 0 and 1 of a job, rank 1's NCCL kernels 3x longer: it waits for rank 0.

    False (no run) when ../shared is absent; the cross-rank checks then skip.
    """
    import gzip
    import json
    import unittest

    from gpuprof_testing.realtraces import shared_path

    try:
        src = shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "timeline_analysis",
                          "sampled_rank-0.json.gz")
    except unittest.SkipTest:
        return False
    d = logdir / "job"
    d.mkdir()
    for r in (0, 1):
        doc = json.loads(gzip.open(src).read())
        doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": r, "world_size": 2}
        for e in doc["traceEvents"] if r == 1 else ():
            if e.get("cat") == "kernel" and str(e.get("name", "")).startswith("nccl"):
                e["dur"] *= 3
        (d / f"rank{r}.pt.trace.json").write_text(json.dumps(doc))
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry_point_installed() -> bool:
    return any(ep.name == "gpuprof" for ep in entry_points(group="tensorboard_plugins"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    torch = pytest.importorskip("torch")
    pytest.importorskip("tensorboard")
    logdir = tmp_path_factory.mktemp("tblogs")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _capture(logdir, "before", slow_loader=True)
        _capture(logdir, "after", slow_loader=False)
    finally:
        torch.set_num_threads(threads)
    from gpuprof_testing.snapshots import MiB, SnapshotBuilder

    snap = SnapshotBuilder()  # CPU captures write no snapshot: a CUDA-like one beside the "after" capture
    snap.alloc(64 * MiB, snap.stack(("/home/u/train.py", 42, "train_step")))
    snap.dump(logdir / "after" / "w.1.memory_snapshot.pickle")
    names = _hostile_run(logdir)
    job = _two_rank_job(logdir)
    port = _free_port()
    flags = ["--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port), "--path_prefix", PREFIX,
             "--reload_interval", "0"]
    if _entry_point_installed():
        cmd = [sys.executable, "-m", "tensorboard.main", *flags]
    else:
        cmd = [sys.executable, str(Path(__file__).with_name("launch_tb.py")), *flags]
    log = open(logdir.parent / "tensorboard.log", "w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    base = f"http://127.0.0.1:{port}{PREFIX}/"
    try:
        for _ in range(300):
            if proc.poll() is not None:
                break
            try:
                urllib.request.urlopen(base + "data/plugins_listing", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("TensorBoard did not answer within 30 s")
        if proc.poll() is not None:
            log.seek(0)
            pytest.fail(f"TensorBoard exited: {log.read()[-2000:]}")
        yield {"base": base, "port": port, "names": names, "logdir": logdir, "log": log, "job": job,
               "entry_point": _entry_point_installed()}
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()




class Tab:
    """TensorBoard opened on the gpuprof tab; every request recorded, other hosts refused."""

    def __init__(self, browser: Any, server: dict[str, Any]) -> None:
        self.origin = f"http://127.0.0.1:{server['port']}"
        self.requests: list[str] = []
        self.foreign: list[str] = []
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        self.ctx.route("**/*", self._route)
        self.page = self.ctx.new_page()
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(server["base"] + "#gpuprof")
        self.frame = self._plugin_frame()
        self.frame.wait_for_function("() => +document.body.dataset.rendered >= 1", timeout=30_000)

    def _route(self, route: Any) -> None:
        url = route.request.url
        self.requests.append(url)
        if url.startswith(self.origin + "/") or url.startswith("data:") or url.startswith("blob:"):
            route.continue_()
        else:
            self.foreign.append(url)
            route.abort()

    def _plugin_frame(self) -> Any:
        for _ in range(150):
            for f in self.page.frames:
                if f.url.endswith(PREFIX + "/data/plugin/gpuprof/index.html"):
                    return f
            self.page.wait_for_timeout(100)
        raise AssertionError(f"the gpuprof frame never loaded; frames: {[f.url for f in self.page.frames]}")

    def rendered(self) -> int:
        return int(self.frame.evaluate("() => +document.body.dataset.rendered"))

    def close(self) -> None:
        self.ctx.close()


def test_tab_lists_runs_draws_charts_shows_gp102_and_compares(browser: Any, server: dict[str, Any]) -> None:
    tab = Tab(browser, server)
    try:
        fr = tab.frame
        assert tab.page.locator("text=gpuprof").first.is_visible()  # the tab in TensorBoard's bar
        runs = fr.locator("#run option").all_text_contents()
        want = ["after (capture)", "before (capture)", HOSTILE_DIR] + (["job"] if server["job"] else [])
        assert sorted(runs) == sorted(want)
        assert fr.locator("#crossrank").is_hidden()  # one process: no cross-rank view
        fr.select_option("#run", "before")
        # the capture's GP601 (measured live) supersedes the trace's GP102: one finding, as in every view
        fr.wait_for_function("() => document.querySelector('[data-code=GP601]') !== null", timeout=30_000)
        assert fr.locator("[data-code=GP102]").count() == 0
        text = fr.locator("[data-code=GP601]").first.text_content()
        assert "DataLoader(" in text and "persistent_workers=True" in text and "data_loading_share" in text
        assert "supersedes" in text and "GP102" in text  # the link to the folded finding, drawn
        # the step-time chart: one stacked bar part per step and non-zero part (4 recorded steps)
        bars = fr.locator("#steps-chart rect.bar")
        assert bars.count() >= 4
        heights = [float(bars.nth(i).get_attribute("height")) for i in range(bars.count())]
        assert max(heights) > 50
        assert "data_loading" in fr.locator("#steps-chart").text_content()
        assert fr.locator("#ops tr").count() > 3  # top operators of a CPU run
        # the report's views of the trace, whole: a CPU run has operators (no kernels)
        assert fr.locator("#view-operators tr").count() > fr.locator("#ops tr").count()
        assert fr.locator("[data-view=kernels]").text_content().endswith("no kernels in this trace")
        # the timeline is fetched only when its section is opened (test_timeline_is_fetched_when_opened_and_drawn)
        assert fr.locator("#timeline canvas").count() == 0
        # comparison: this run (after) against "before"
        fr.select_option("#run", "after")
        fr.wait_for_function("() => document.querySelector('#cards') && document.querySelector('#run').value === 'after'")
        n = tab.rendered()
        fr.select_option("#cmp", "before")
        fr.wait_for_function(f"() => +document.body.dataset.rendered > {n} && document.getElementById('compare-metrics') !== null",
                             timeout=30_000)
        # the memory viewer of the run's snapshot, in its sandboxed frame
        fr.click("#snapopen")
        fr.wait_for_selector("#memframe iframe", timeout=30_000)
        for _ in range(100):  # the iframe element comes first, its navigation to memory.html a moment later
            mem = next((f for f in fr.child_frames if "memory.html" in f.url), None)
            if mem is not None:
                break
            tab.page.wait_for_timeout(100)
        assert mem is not None, [f.url for f in fr.child_frames]
        mem.wait_for_function("() => +document.body.dataset.rendered >= 1", timeout=30_000)
        assert "train.py:42" in mem.locator("#top").text_content()
        # gpuprof diff's document, drawn by GP.diff as `gpuprof diff --html` draws it (tests/security/test_compare_surfaces.py)
        fixed = fr.locator("#compare-findings-removed").text_content()
        assert "GP601" in fixed and "GP102" not in fixed  # GP102 folded into it
        assert "predicted" in fixed and "measured (step)" in fixed
        # a saving is never drawn "+x" (green) beside a change column that reads "-x" for the same time
        cells = fr.evaluate("() => [...document.querySelectorAll('#compare-findings-removed tr')].slice(1)"
                            ".map(r => [...r.cells].map(c => c.textContent))")
        assert cells and not any(c.startswith("+") for row in cells for c in row), cells
        rows = fr.evaluate("() => [...document.querySelectorAll('#compare-metrics tr')].map(r => [...r.cells].map(c => [c.textContent, c.className]))")
        loading = next(r for r in rows if r[0][0] == "step: data_loading")  # the loader's time fell: drawn as better
        assert loading[3][1] == "better" and loading[3][0].startswith("-") and len(rows) >= 4
        # changed operators: searchable tables (drawn after the comparison's fetch: wait for them on a loaded host)
        fr.wait_for_function("() => document.querySelectorAll('#compare-body input[type=search]').length >= 1",
                             timeout=60_000)
        # the whole comparison fits the 1,280 px window: no horizontal scroll of the tab or of TensorBoard's page
        # (it was 1,685 px wide); a table too wide scrolls inside its own box
        fits = "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        for widths in (fr.evaluate(fits), tab.page.evaluate(fits)):
            assert widths[0] <= widths[1] <= 1280, widths
        if server["job"]:  # two ranks of a real NCCL trace: the cross-rank view of gpuprof.distributed
            fr.select_option("#run", "job")
            fr.wait_for_function("() => !document.getElementById('crossrank').hidden", timeout=60_000)
            line = fr.locator("#xstraggler").text_content()
            assert line.startswith("straggler: rank 0 (the others wait ") and "its excess:" in line
            assert fr.locator("#xstraggler").is_visible()
            assert fr.locator("#xranks tr").count() == 3 and "0 (straggler)" in fr.locator("#xranks").text_content()
            colls = fr.locator("#xcolls").text_content()  # typed from the host records: no send_recv catch-all
            assert "all_to_all" in colls and "all_reduce" in colls and "send_recv" not in colls
            assert "2 ranks of 2, backend nccl" in fr.locator("#xhead").text_content()
            # the job's critical path across the ranks (docs/critical-path.md), as the CLI's table
            assert fr.locator("#xpath tr").count() >= 2 and "per step over" in fr.locator("#xpathhead").text_content()
            gp701 = fr.locator("[data-code=GP701]").first
            assert "cross-rank analysis" in gp701.text_content() and "rank 0" in gp701.text_content()
        assert tab.errors == [] and tab.dialogs == []
        assert tab.foreign == [], tab.foreign  # nothing but the TensorBoard server was asked for anything
        assert {u.split("/")[2] for u in tab.requests if u.startswith("http")} == {f"127.0.0.1:{server['port']}"}
        assert any("/data/plugin/gpuprof/run?" in u for u in tab.requests)
        if os.environ.get("GPUPROF_TB_SCREENSHOT"):  # docs/img/tensorboard-*.png are made this way
            tab.page.screenshot(path=os.environ["GPUPROF_TB_SCREENSHOT"])
    finally:
        tab.close()


def _route_json(server: dict[str, Any], route: str, **params: str) -> Any:
    import json
    from urllib.parse import urlencode

    url = f"{server['base']}data/plugin/gpuprof/{route}?{urlencode(params)}"
    for _ in range(600):
        j = json.loads(urllib.request.urlopen(url, timeout=10).read())
        if j["status"] != "pending":
            return j
        time.sleep(0.1)
    raise AssertionError(f"{url} still pending")


def _shown(label: str, n: int = 80) -> str:
    """A lane's label as the drawing shows it (GP.short)."""
    return label if len(label) <= n else label[:n] + f"\u2026 ({len(label) - n} more characters)"


def _drawn(fr: Any, box: str, more_than: int = 0) -> int:
    fr.wait_for_function(f"() => +(document.getElementById('{box}').getAttribute('data-drawn') || 0) > {more_than}",
                         timeout=60_000)
    return int(fr.locator("#" + box).get_attribute("data-drawn") or 0)


def test_timeline_is_fetched_when_opened_and_drawn(browser: Any, server: dict[str, Any]) -> None:
    """The run answer has no timeline: opening the section fetches the selected trace's, and GP.timeline draws its lanes."""
    run = "job" if server["job"] else "before"
    tab = Tab(browser, server)
    try:
        fr = tab.frame
        fr.select_option("#run", run)
        fr.wait_for_function(f"() => document.getElementById('run').value === {run!r} && "
                             "!document.getElementById('content').hidden && "
                             "document.getElementById('timeline-size').textContent.includes('lanes')", timeout=60_000)
        view = _route_json(server, "run", run=run)["view"]
        assert all("timeline" not in t["summary"] and t["timeline_ref"] for t in view["traces"])
        assert fr.locator("#timeline canvas").count() == 0  # closed: nothing asked for, nothing drawn
        assert not any("/gpuprof/timeline" in u for u in tab.requests)
        fr.click("#timeline-open summary")
        _drawn(fr, "timeline")
        fetched = [u for u in tab.requests if "/data/plugin/gpuprof/timeline?" in u]
        assert fetched and "trace=" in fetched[-1]
        ref = view["traces"][0]["timeline_ref"]
        want = _route_json(server, "timeline", run=run, trace=ref["trace"])["timeline"]
        # the lanes of the trace's timeline, drawn beside their labels, by the --html page's code
        assert fr.locator("#timeline .gp-tl-lane").all_text_contents() == [_shown(ln["label"] or ln["id"]) for ln in want["lanes"]]
        assert fr.locator("#timeline canvas").count() == 1 and ref["lanes"] == len(want["lanes"])
        if len(view["traces"]) > 1:  # another trace: its own timeline fetched and drawn; back again from the page's copy
            fr.select_option("#trace", "1")
            want1 = _route_json(server, "timeline", run=run, trace=view["traces"][1]["timeline_ref"]["trace"])["timeline"]
            fr.wait_for_function(f"() => document.querySelectorAll('#timeline .gp-tl-lane').length === {len(want1['lanes'])} "
                                 "&& +(document.getElementById('timeline').getAttribute('data-drawn') || 0) > 0", timeout=60_000)
            assert len([u for u in tab.requests if "/gpuprof/timeline?" in u]) == len(fetched) + 1
            fr.select_option("#trace", "0")
            fr.wait_for_function(f"() => document.querySelectorAll('#timeline .gp-tl-lane').length === {len(want['lanes'])}")
            assert len([u for u in tab.requests if "/gpuprof/timeline?" in u]) == len(fetched) + 1
        if server["job"]:  # two ranks: their collectives one above the other, from their collective lanes only
            assert fr.locator("#timeline-ranks-section").is_visible()
            fr.click("#timeline-ranks-open summary")
            _drawn(fr, "timeline-ranks")
            assert any("/gpuprof/timeline_ranks?" in u for u in tab.requests)
            labels = fr.locator("#timeline-ranks .gp-tl-lane").all_text_contents()
            assert len(labels) == 2 and all(lb.startswith("collectives") for lb in labels)
        if os.environ.get("GPUPROF_TB_SCREENSHOT"):
            fr.locator("#timeline-section").screenshot(path=os.environ["GPUPROF_TB_SCREENSHOT"] + ".timeline.png")
        fr.click("#timeline-open summary")  # closed again: the drawing goes
        fr.wait_for_function("() => document.querySelectorAll('#timeline canvas').length === 0")
        assert tab.errors == [] and tab.dialogs == [] and tab.foreign == []
    finally:
        tab.close()


def test_hostile_run_and_kernel_names_stay_text(browser: Any, server: dict[str, Any]) -> None:
    tab = Tab(browser, server)
    try:
        fr = tab.frame
        fr.select_option("#run", HOSTILE_DIR)
        fr.wait_for_function("() => document.querySelectorAll('#kernels tr').length > 2", timeout=30_000)
        fr.locator("#kernels").hover()
        for _ in range(6):
            tab.page.keyboard.press("Tab")
        tab.page.wait_for_timeout(200)
        assert fr.evaluate("() => window.__gpuprof_pwned") is None
        assert tab.page.evaluate("() => window.__gpuprof_pwned") is None
        assert tab.dialogs == [] and tab.errors == []
        cells = fr.locator("#kernels td.name").all_text_contents()
        # shown as the literal text they are (the 10 longest kernels: the table's length)
        import json
        from urllib.parse import quote
        view = json.loads(urllib.request.urlopen(f"{server['base']}data/plugin/gpuprof/run?run={quote(HOSTILE_DIR)}",
                                                 timeout=10).read())["view"]
        top = [k["name"] for k in view["traces"][0]["summary"]["top_kernels"]]
        assert cells == [n if len(n) <= 300 else n[:300] + f"\u2026 ({len(n) - 300} more characters)" for n in top]
        assert len(set(HTML_HOSTILE) & set(cells)) >= 9 and HUGE_NAME[:5000] in top
        # the views: every kernel and operator of the trace (not only the top 10), sortable and searchable,
        # drawn by the code of the --html page (tests/security/test_share_page.py runs the same checks there)
        views = view["traces"][0]["summary"]["views"]
        assert {k["name"] for k in views["kernels"]} == set(server["names"])
        check_views(fr, views, "onfocus")
        assert fr.evaluate("() => window.__gpuprof_pwned") is None and tab.dialogs == [] and tab.errors == []
        # the timeline of the hostile names, fetched on opening: drawn as pixels, hovered names as text
        fr.click("#timeline-open summary")
        _drawn(fr, "timeline")
        hovered = set()
        for dx in range(5, 1000, 20):  # along the main thread's top row: the operators named by the corpus
            fr.locator("#timeline canvas").hover(position={"x": dx, "y": 30})
            hovered.add(fr.locator("#timeline .gp-tl-info").text_content() or "")
        assert any(name in text for text in hovered for name in HTML_HOSTILE), hovered
        assert fr.evaluate("() => window.__gpuprof_pwned") is None and tab.dialogs == [] and tab.errors == []
        assert HOSTILE_DIR in fr.locator("#run").text_content()
        assert fr.evaluate("() => document.querySelectorAll('img,script:not([src]) ~ script,object,embed,form,base').length") == 0
        assert fr.evaluate("""() => [...document.querySelectorAll('*')].filter(e =>
            [...e.attributes].some(a => a.name.startsWith('on'))).length""") == 0
        # Trusted Types (the <meta> policy): markup from a string is refused even if a later edit tried it
        assert fr.evaluate("""() => { try { document.getElementById('cards').innerHTML = '<b>x</b>'; return 'assigned'; }
                                      catch (e) { return e.name; } }""") == "TypeError"
        assert tab.foreign == []
    finally:
        tab.close()


@pytest.mark.slow  # a TensorBoard server started for it: out of the README's fast command
def test_plugin_is_listed_by_the_installed_entry_point_or_the_launcher(server: dict[str, Any]) -> None:
    import json

    listing = json.loads(urllib.request.urlopen(server["base"] + "data/plugins_listing", timeout=5).read())
    assert listing["gpuprof"]["enabled"] is True
    assert listing["gpuprof"]["loading_mechanism"]["module_path"].endswith("/data/plugin/gpuprof/index.js")
    server["log"].seek(0)
    log = server["log"].read()
    assert "Illegal Content-Security-Policy" not in log  # TensorBoard's validator accepted our headers
