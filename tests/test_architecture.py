"""The house's floors and wings (docs/ARCHITECTURE.md) hold: no import cycle among the project's modules, imports
only go down (pages → viz_ui.app → viz_ui.views → viz_ui.analysis → viz_model), and the analysis and views wings
run without Streamlit."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

PACKAGES = ("viz_model", "viz_ui")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Every project module that ``path`` imports, at module level or inside a function (an import inside a function
    still runs, and is the usual way to hide a cycle)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, name, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, 1972)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    graph = _graph()
    assert len(graph) > 100  # the walk found the project
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


FLOORS = ["viz_ui.app", "viz_ui.views", "viz_ui.analysis", "viz_model"]  # each imports only what is below it


def _floor(name: str) -> int | None:
    for i, floor in enumerate(FLOORS):
        if name == floor or name.startswith(floor + "."):
            return i
    return None


def test_imports_only_go_down():
    upward = []
    for name, targets in _graph().items():
        mine = _floor(name)
        for target in targets:
            theirs = _floor(target)
            if mine is not None and theirs is not None and theirs < mine:
                upward.append(f"{name} -> {target}")
    assert upward == []


def test_the_analysis_and_views_wings_run_without_streamlit():
    """Every module of viz_ui.analysis (and viz_ui.views, and viz_model) imports in a fresh interpreter without
    Streamlit being loaded, directly or through anything they import; analysis loads no Plotly either."""
    wings = {"viz_ui.analysis": ("streamlit", "plotly"), "viz_ui.views": ("streamlit",), "viz_model": ("streamlit",)}
    for wing, banned in wings.items():
        names = [name for name in _modules() if name == wing or name.startswith(wing + ".")]
        code = ("import importlib, sys\n"
                f"for name in {names!r}:\n    importlib.import_module(name)\n"
                f"print(sorted(m for m in {list(banned)!r} if m in sys.modules))")
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.strip().splitlines()[-1] == "[]", (wing, proc.stdout)


def test_no_module_shadows_the_standard_library():
    """A module named as a standard-library one (``inspect``, ``io``, ``trace``) confuses readers and tools."""
    shadowing = sorted(name for name in _modules() if name.rpartition(".")[2] in sys.stdlib_module_names)
    assert shadowing == []
