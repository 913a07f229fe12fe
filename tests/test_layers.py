"""Data flows one way: capture -> files -> trace -> rules -> report -> renderers.

A static check of gpuprof's own imports (module level and inside functions), so a shortcut across the
layers (the trace loader reaching into distributed, a rule reaching into the capture) fails here
instead of growing unseen. Every top-level module or subpackage sits on one layer of :data:`LAYERS`
(drawn in docs/architecture.md); a module imports its own layer and the ones below, at module level or
inside a function alike (a lazy upward import is still a dependency upward).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuprof_testing.cycles import cycles

PKG = Path(__file__).resolve().parents[1] / "gpuprof"

# package -> the gpuprof packages/modules it may import besides itself
ALLOWED = {
    # remote: inputs named by URL; redact: what is shown of one (a leaf, like units)
    "trace": {"errors", "findings", "frames", "inputs", "redact", "remote", "safefile", "units"},
    "findings": {"units"},
    "report": {"findings", "notebookhook", "redact", "trace", "units", "version"},
    "rules": {"codes", "codespec", "errors", "findings", "report", "trace", "units"},
    "render": {"atomic", "errors", "findings", "notebookhook", "remote", "report", "saved", "trace", "units"},
}
# nobody below the command line imports it
CLI_USERS = {"cli", "__main__"}


def _imports() -> dict[str, dict[str, set[str]]]:
    """package -> {imported gpuprof package -> files importing it}."""
    out: dict[str, dict[str, set[str]]] = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG).parts
        pkg = parts[0] if len(parts) > 1 else path.stem
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith("gpuprof."):
                    target = name.split(".")[1]
                    if target != pkg:
                        out.setdefault(pkg, {}).setdefault(target, set()).add(str(path.relative_to(PKG)))
    return out


def test_layers_import_only_downstream() -> None:
    deps = _imports()
    assert "trace" in deps and "rules" in deps  # the walk found the packages
    for pkg, allowed in ALLOWED.items():
        extra = {t: sorted(files) for t, files in deps.get(pkg, {}).items() if t not in allowed}
        assert not extra, f"gpuprof/{pkg} imports {extra}"


def test_nothing_below_the_cli_imports_it() -> None:
    users = {pkg for pkg, targets in _imports().items() if "cli" in targets}
    assert users <= CLI_USERS, users


# Imports of a higher layer that are intended, each with its reason: module -> units it may import. Empty.
UPWARD: dict[str, tuple[str, ...]] = {}

# gpuprof run's launcher adds the framework callbacks to Trainers the user built without them (docs/run.md,
# "The step clock"), inside a function, once the Trainer exists: the one user of the integrations
INTEGRATIONS_USERS = {"gpuprof.run.bootstrap"}


def test_nothing_imports_the_framework_integrations() -> None:
    """gpuprof.integrations sits on top of the capture's public API; nothing in gpuprof depends on it, but
    the launcher's bootstrap (:data:`INTEGRATIONS_USERS`)."""
    users = {a for a, b, _, _ in EDGES if _unit(b) == "integrations" and _unit(a) != "integrations"}
    assert users <= INTEGRATIONS_USERS, users


# Import circles (module level and inside functions) that are intended, each with its reason. Imports
# under `if TYPE_CHECKING:` are left out: they are never executed. Empty: gpuprof has none.
INTENDED_CYCLES: dict[frozenset[str], str] = {}


def _module_graph() -> dict[str, set[str]]:
    """gpuprof module -> the gpuprof modules it imports (a package's ``__init__`` is the package's name)."""
    mods: dict[str, Path] = {}
    for path in PKG.rglob("*.py"):
        parts = ("gpuprof", *path.relative_to(PKG).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node.test)
                for stmt in node.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("gpuprof"):
                # `from gpuprof.x import y` imports module gpuprof.x.y when there is one, else a name of gpuprof.x
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("gpuprof")]
            for t in targets:
                r = resolve(t)
                if r is not None and r != mod:
                    graph[mod].add(r)
    return graph


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


_cycles = cycles  # gpuprof_testing.cycles: the one finder, shared with tests/test_capture_shape.py


def test_cycle_finder_finds_a_planted_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [frozenset("abc")]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_undocumented_import_circle() -> None:
    graph = _module_graph()
    assert "gpuprof.runner" in graph["gpuprof.flow"]  # the walk saw module-level imports
    assert "gpuprof.codes" in graph["gpuprof.flow"]  # and imports inside functions
    found = [c for c in _cycles(graph) if c not in INTENDED_CYCLES]
    assert not found, "import circles in gpuprof (break them, or document them in INTENDED_CYCLES): " + "; ".join(
        " <-> ".join(sorted(c)) for c in found)


def _folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Top-level part (``capture``, ``run``, ``report``...) -> the other parts its modules import."""
    out: dict[str, set[str]] = {}
    for mod, targets in graph.items():
        out.setdefault(_unit(mod), set()).update(_unit(t) for t in targets)
    for unit, targets in out.items():
        targets.discard(unit)
    for targets in list(out.values()):
        for t in targets:
            out.setdefault(t, set())
    return out


def test_folder_circle_finder_finds_a_planted_circle() -> None:
    """Two parts importing each other through different modules: no module circle, one folder circle."""
    graph = {"gpuprof.a.x": {"gpuprof.b.y"}, "gpuprof.b.y": set(), "gpuprof.b.z": {"gpuprof.a.w"},
             "gpuprof.a.w": set(), "gpuprof.c": {"gpuprof.a.x"}}
    assert _cycles(graph) == []
    assert _cycles(_folder_graph(graph)) == [frozenset({"a", "b"})]


def test_no_import_circle_between_top_level_parts() -> None:
    """A part (a top-level module or subpackage) never imports one that imports it back, through any of their
    modules (``capture`` <-> ``run`` was such a circle, with no module circle in it). Imports under
    ``if TYPE_CHECKING:`` are left out, as in the module graph."""
    folders = _folder_graph(_module_graph())
    assert "capture" in folders["run"]  # the walk saw the launcher use the capture
    found = _cycles(folders)
    assert not found, "import circles between parts of gpuprof: " + "; ".join(
        " <-> ".join(sorted(c)) for c in found)


# Lowest first. The package root (gpuprof/__init__.py) is the public facade: it may name anything, lazily.
LAYERS: tuple[tuple[str, ...], ...] = (
    # plain data and helpers every layer uses
    ("version", "errors", "units", "findings", "codespec", "lazyexports", "atomic", "safefile", "torchdep",
     "remote", "frames", "inputs", "pool", "runner", "cluster", "limits", "redact", "stats"),
    ("trace",),  # load -> trace model and metrics
    ("report", "notebookhook", "rules", "views", "runtimecodes", "capturerun", "saved"),  # rules -> report
    ("render", "summarize"),  # report -> renderers
    ("memory", "distributed", "codes", "flow", "diff", "htmlpage", "export", "history", "trackers"),  # whole features
    ("analysis", "commands"),  # gpuprof analyze, as a library call; the commands' library paths (no click)
    ("tbplugin", "capture", "mcp"),  # the TensorBoard tab; capture (analyses its own traces when a run ends), the job
    # watch; the MCP server over the commands' library paths (no click)
    ("integrations",),  # framework callbacks, over the capture
    ("run",),  # gpuprof run's launcher: starts the capture in the job's processes, adds the framework callbacks
    # the pytest plugin, over the launcher's step clock, capture and diff; gpuprof try's trials (launcher, diff's noise)
    ("pytest_plugin", "trials"),
    ("cli",),
    ("__main__", "__init__", "data"),
)
LEVEL = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _unit(module: str) -> str:
    """The top-level module or subpackage of gpuprof that ``module`` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _import_statements(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, with whether it runs when the module is imported."""

    def walk(nodes: list[ast.stmt], at_import: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node, at_import
            elif isinstance(node, ast.If):
                yield from walk(node.body, at_import and not _is_type_checking(node.test))
                yield from walk(node.orelse, at_import)
            elif isinstance(node, ast.Try):
                for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                    yield from walk(block, at_import)
            elif isinstance(node, (ast.With, ast.For, ast.While)):
                yield from walk(node.body, at_import)
            else:  # functions and classes: a function body runs later; a class body runs now
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.stmt):
                        yield from walk([child], at_import and isinstance(node, ast.ClassDef))

    yield from walk(tree.body, True)


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The gpuprof modules an import statement names (``from pkg import name`` names pkg.name if a module)."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".")
            if MODULES[module].name != "__init__.py":
                parts.pop()
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join([*parts, base] if base else parts)
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    out = []
    for name in names:
        if name.split(".")[0] != "gpuprof":
            continue
        while name not in MODULES and "." in name:
            name = name.rsplit(".", 1)[0]
        out.append(name)
    return out


def _edges() -> list[tuple[str, str, bool, int]]:
    edges = []
    for module, path in MODULES.items():
        for node, at_import in _import_statements(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _targets(module, node):
                edges.append((module, target, at_import, node.lineno))
    return edges


EDGES = _edges()


def test_the_reader_sees_the_imports_it_must() -> None:
    """The walk finds known imports of each kind (else the other tests would pass on nothing)."""
    found = {(a, b, now) for a, b, now, _ in EDGES}
    assert ("gpuprof.__main__", "gpuprof.cli", True) in found
    assert ("gpuprof.capture.session", "gpuprof.capture.window", True) in found  # module level
    assert ("gpuprof.codes", "gpuprof.runtimecodes", False) in found  # inside a function
    assert ("gpuprof.capture.window", "gpuprof.capture.checks.base", False) in found  # TYPE_CHECKING only
    assert len(EDGES) > 500


def test_every_part_of_the_package_has_a_layer() -> None:
    missing = sorted({_unit(m) for m in MODULES} - set(LEVEL))
    assert not missing, f"give these a layer in LAYERS: {missing}"
    assert not sorted(set(LEVEL) - {_unit(m) for m in MODULES} - {"data"}), "LAYERS names parts that are gone"


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [f"{a} (line {line}) imports {b}" for a, b, _, line in EDGES
              if _unit(a) != "__init__" and LEVEL[_unit(b)] > LEVEL[_unit(a)] and _unit(b) not in UPWARD.get(a, ())]
    assert not upward, "\n".join(upward)


@pytest.mark.parametrize("lower", ["trace", "rules", "render", "report", "runtimecodes", "codes", "analysis"])
def test_the_analysis_side_never_reaches_capture_or_the_cli(lower: str) -> None:
    """Spelled out for the layers the architecture names: ``analyze`` must work without capture (and torch)."""
    bad = [f"{a}:{line} -> {b}" for a, b, _, line in EDGES
           if _unit(a) == lower and _unit(b) in ("capture", "cli", "integrations", "tbplugin")]
    assert not bad, bad


@pytest.mark.parametrize("part", ["mcp", "commands"])
def test_the_mcp_server_and_the_commands_import_no_click_nor_the_cli(part: str) -> None:
    """The commands' library paths raise gpuprof's own errors and the MCP server calls them: click is the command
    line's alone, at module level or inside a function alike."""
    files = sorted((PKG / part).rglob("*.py"))
    assert files, part
    bad = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bad += [f"{path.relative_to(PKG)}:{node.lineno} imports {n}" for n in names
                    if n.split(".")[0] == "click" or n == "gpuprof.cli" or n.startswith("gpuprof.cli.")]
    assert not bad, bad


def test_nothing_imports_the_cli_but_main_by_module() -> None:
    users = sorted({a for a, b, _, _ in EDGES if _unit(b) == "cli" and _unit(a) != "cli"})
    assert users == ["gpuprof.__main__"]


def _import_time_graph() -> dict[str, set[str]]:
    """Module -> the modules importing it loads at once (each named module and the packages above it)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for a, b, at_import, _ in EDGES:
        if not at_import:
            continue
        parts = b.split(".")
        for k in range(2, len(parts) + 1):  # the root package is loaded first by everything: not an edge
            target = ".".join(parts[:k])
            if target != a and not a.startswith(target + "."):  # a package's own parents are loading already
                graph[a].add(target)
    return graph


def test_no_import_cycle_at_import_time_with_the_packages_each_import_loads() -> None:
    """``import gpuprof.a.b`` runs ``gpuprof/a/__init__.py`` first: a package whose ``__init__`` imports a
    module that imports the package back is a circle the module graph above does not show."""
    found = cycles(_import_time_graph())
    assert not found, "; ".join(" <-> ".join(sorted(c)) for c in found)


# Modules that hand on names defined elsewhere on purpose, each with its reason; any other import of a name
# through a module that only imports it (a re-export shim) fails below.
FACADES = {
    "gpuprof.report": "the report's record types (DeviceInfo, KernelStat, ...) are defined with the code that fills "
                      "them and are part of the report (docs/report-schema.md)",
    "gpuprof.codes": "the registry's public face: CodeSpec and Option with catalogue() and lookup()",
}


def _top_level_names(path: Path) -> tuple[set[str], dict[str, str]]:
    """Names ``path`` defines at module level, and the gpuprof names it imports (name -> module)."""
    defined: set[str] = set()
    imported: dict[str, str] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gpuprof"):
            imported.update({a.asname or a.name: node.module for a in node.names})
    return defined, imported


def test_names_are_imported_from_the_module_that_defines_them() -> None:
    names = {m: _top_level_names(p) for m, p in MODULES.items() if p.name != "__init__.py"}
    users = [*PKG.rglob("*.py"), *(PKG.parent / "tests").rglob("*.py"), *(PKG.parent / "bench").rglob("*.py")]
    through = []
    for path in users:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in names and node.module not in FACADES:
                defined, imported = names[node.module]
                through += [f"{path.relative_to(PKG.parent)}:{node.lineno}: {a.name} from {node.module} "
                            f"(defined in {imported[a.name]})" for a in node.names
                            if a.name not in defined and a.name in imported]
    assert not through, "\n".join(through)


def test_the_shim_check_sees_a_shim(tmp_path: Path) -> None:
    shim = tmp_path / "shim.py"
    shim.write_text("from gpuprof.units import fmt_us\n\nX = 1\n\ndef f():\n    pass\n", encoding="utf-8")
    defined, imported = _top_level_names(shim)
    assert defined == {"X", "f"} and imported == {"fmt_us": "gpuprof.units"}
