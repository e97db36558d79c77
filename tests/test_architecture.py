"""The house's floors and wings (docs/ARCHITECTURE.md) hold, over the whole tree (the packages ``viz_model`` and
``viz_ui``, the app's scripts ``app.py``, ``serve.py`` and ``pages/``, and ``scripts/`` and ``bench/``): no import
cycle; imports only go down (pages → viz_ui.app → viz_ui.views → viz_ui.analysis → viz_model, class mode beside the
app); nothing imports ``scripts/`` or ``bench/``; the analysis and views wings run without Streamlit; and the
architecture document names only paths that exist, and every module."""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

PACKAGES = ("viz_model", "viz_ui")
SCRIPT_FOLDERS = ("pages", "scripts", "bench")  # run as scripts: a bare import names a module of the same folder
TOP_SCRIPTS = ("app.py", "serve.py")
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    """Every Python module of the tree by dotted name: ``viz_ui.app.layout``, ``pages.attention``, ``bench.common``,
    ``app``."""
    paths = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    paths += [p for folder in SCRIPT_FOLDERS for p in sorted((ROOT / folder).glob("*.py"))]
    paths += [ROOT / name for name in TOP_SCRIPTS]
    return {_module_name(path): path for path in paths}


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Every module of the tree that ``path`` imports, at module level or inside a function (an import inside a
    function still runs, and is the usual way to hide a cycle). In a script folder a bare name is first the
    folder's own module (Python puts a script's own folder first on its module search path)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    folder = name.rpartition(".")[0] if name.split(".")[0] in SCRIPT_FOLDERS else None
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
            if folder and f"{folder}.{target.split('.')[0]}" in modules:
                target = f"{folder}.{target}"
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


def test_the_walk_covers_the_whole_tree():
    graph = _graph()
    for name in ("viz_model.config", "viz_ui.app.layout", "pages.attention", "scripts.train_dictionaries",
                 "bench.latency", "app", "serve"):
        assert name in graph
    assert "bench.common" in graph["bench.latency"]  # a script folder's bare import: its own module
    assert "scripts.evaluate_dictionaries" in graph["scripts.train_dictionaries"]
    assert "viz_ui.app.layout" in graph["app"] and "viz_ui.classroom.news" in graph["serve"]


def test_no_import_cycle():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# Each floor imports only what is on its own floor or below. Class mode (viz_ui.classroom) is a wing of the app's
# floor: the app's layout calls it, and it reads the app's model and trace cache and page table (see below).
FLOORS = [("pages", "app", "serve"), ("viz_ui.app", "viz_ui.classroom"), ("viz_ui.views",), ("viz_ui.analysis",),
          ("viz_model",)]
CLASS_MODE_ENTRY = {"viz_ui.app.layout"}  # the app's modules that import class mode
CLASS_MODE_READS = {"viz_ui.app.state", "viz_ui.app.navigation"}  # the app's modules that class mode imports


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _floor(name: str) -> int | None:
    for i, floor in enumerate(FLOORS):
        if any(_within(name, prefix) for prefix in floor):
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


def test_the_floor_finder_places_each_wing():
    assert [_floor(n) for n in ("pages.heads", "app", "viz_ui.classroom.ui", "viz_ui.app.state", "viz_ui.views.qk",
                                "viz_ui.analysis.cost", "viz_model.limits", "bench.latency")] == [0, 0, 1, 1, 2, 3, 4,
                                                                                                   None]


def test_class_mode_meets_the_app_at_its_two_seams():
    """The app's layout is where class mode enters a page; class mode reads the app's state (models, traces) and page
    table, nothing else of the app: so the two cannot grow a cycle through the rest of the app."""
    graph = _graph()
    entries = {name for name, targets in graph.items() if _within(name, "viz_ui.app")
               and any(_within(t, "viz_ui.classroom") for t in targets)}
    reads = {t for name, targets in graph.items() if _within(name, "viz_ui.classroom")
             for t in targets if _within(t, "viz_ui.app")}
    assert entries == CLASS_MODE_ENTRY and reads == CLASS_MODE_READS


def test_nothing_imports_scripts_or_bench():
    """``scripts/`` and ``bench/`` may import the packages; only their own folder imports them (their modules are run,
    not imported)."""
    wrong = [f"{name} -> {target}" for name, targets in _graph().items() for target in targets
             for folder in ("scripts", "bench", "pages") if _within(target, folder) and not _within(name, folder)]
    assert wrong == []


def test_the_analysis_and_views_wings_run_without_streamlit():
    """Every module of viz_ui.analysis (and viz_ui.views, and viz_model) imports in a fresh interpreter without
    Streamlit being loaded, directly or through anything they import; analysis loads no Plotly either."""
    wings = {"viz_ui.analysis": ("streamlit", "plotly"), "viz_ui.views": ("streamlit",), "viz_model": ("streamlit",)}
    for wing, banned in wings.items():
        names = [name for name in _modules() if _within(name, wing)]
        code = ("import importlib, sys\n"
                f"for name in {names!r}:\n    importlib.import_module(name)\n"
                f"print(sorted(m for m in {list(banned)!r} if m in sys.modules))")
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.strip().splitlines()[-1] == "[]", (wing, proc.stdout)


def test_no_module_shadows_the_standard_library():
    """A module named as a standard-library one (``inspect``, ``io``, ``trace``) confuses readers and tools, and in a
    script folder it replaces the standard one for every script there."""
    shadowing = sorted(name for name in _modules() if name.rpartition(".")[2] in sys.stdlib_module_names)
    assert shadowing == []


# ------------------------------------------------------------------------------ the architecture document

PATH_LIKE = re.compile(r"^[\w./*-]+(/|\.(py|js|css|md|json|toml|txt|sh|yaml|cfg))$")


def _named_paths(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """Every backticked path of a Markdown text (``viz_ui/app/``, ``layout.py``, ``code_*.py``) with the folders it
    may be relative to, from where it stands: the section's folder (a heading that names one), the folder that
    starts a table row (``| `loading/` | …``), the folder a table column names in its header (``model
    (`viz_model`)``), and the project's root and packages. Fenced code blocks are skipped."""
    out: list[tuple[str, tuple[str, ...]]] = []
    section, columns = "", []
    for line in re.sub(r"```.*?```", "", text, flags=re.S).splitlines():
        ticks = re.findall(r"`([^`]+)`", line)
        if line.startswith("#"):
            section = next((t.rstrip("/") for t in ticks if t.endswith("/")), "")
            columns = []
            continue
        row, cells = "", []
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not columns and not set(line) <= set("|-: "):  # a table's header: a column's folder
                columns = [next(iter(re.findall(r"`([^`]+)`", c)), "") for c in cells]
                continue
            first = re.findall(r"`([^`]+)`", cells[0])
            row = first[0].rstrip("/") if first and first[0].endswith("/") else ""
        elif not line.strip():
            columns = []
        for i, cell in enumerate(cells or [line]):
            column = columns[i] if cells and i < len(columns) else ""
            column = {"analysis": "viz_ui/analysis", "views": "viz_ui/views"}.get(column, column)
            for tick in re.findall(r"`([^`]+)`", cell):
                if PATH_LIKE.match(tick) and not tick.startswith("."):
                    bases = [b for b in (f"{section}/{row}" if section and row else row, column, section) if b]
                    out.append((tick, (*bases, "", "viz_ui", "viz_model")))
    return out


def _exists(path: str, bases: tuple[str, ...]) -> bool:
    for base in bases:
        where = ROOT / base
        if "*" in path:
            if list(where.glob(path)):
                return True
        elif (where / path).exists():
            return True
    return False


def test_every_path_the_architecture_names_exists():
    named = _named_paths(ARCHITECTURE.read_text(encoding="utf-8"))
    assert len(named) > 100  # the parse found the document's paths
    missing = sorted({path for path, bases in named if not _exists(path, bases)})
    assert missing == [], f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def test_the_path_parser_reads_sections_rows_and_columns():
    text = ("### `viz_model/`\n| path | job |\n|---|---|\n| `loading/` | `sources.py`, `gone.py` |\n\n"
            "| concept | model (`viz_model`) | numbers (`analysis`) |\n|---|---|---|\n| x | `hooks.py` | `trace.py` |\n")
    named = dict(_named_paths(text))
    assert _exists("sources.py", named["sources.py"]) and not _exists("gone.py", named["gone.py"])
    assert _exists("hooks.py", named["hooks.py"]) and not _exists("trace.py", named["trace.py"])
    assert named["sources.py"][0] == "viz_model/loading" and named["trace.py"][0] == "viz_ui/analysis"


WHOLE_FOLDERS = {"viz_model/loading/families"}  # named as a whole: one converter per Hugging Face model_type


def test_the_architecture_names_every_module():
    """Every module of the packages is named in docs/ARCHITECTURE.md (by its file name, or a pattern such as
    ``code_*.py``), so that a newcomer's map has no blank: a new module gets its line."""
    named = [path.rpartition("/")[2] for path, _ in _named_paths(ARCHITECTURE.read_text(encoding="utf-8"))]
    unnamed = [str(p.relative_to(ROOT)) for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))
               if p.name != "__init__.py" and str(p.parent.relative_to(ROOT)) not in WHOLE_FOLDERS
               and not any(fnmatch.fnmatch(p.name, n) for n in named)]
    assert unnamed == []
