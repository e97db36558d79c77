"""Pages say what they need (issue 26): a function in ``app.py`` (the start page) or ``pages/*.py`` takes what it works on as arguments, it does
not read the page's module-level variables (the model, the trace, a selection) as hidden parameters."""

import ast
import builtins
import symtable

import pytest

from conftest import ROOT

PAGES = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]  # the start page and the others
COMPREHENSIONS = {"listcomp", "setcomp", "dictcomp", "genexpr"}


def allowed_globals(tree: ast.Module) -> set[str]:
    """What a page's functions may read from its module: imports, ALL_CAPS constants, its functions and classes."""
    names = set(dir(builtins))
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def hidden_parameters(source: str, filename: str = "page.py") -> list[tuple[str, int, str]]:
    """``(function, line, name)`` for every module-level name that a function (a def or a lambda, or a
    comprehension inside one) reads and that is not allowed by :func:`allowed_globals`."""
    allowed = allowed_globals(ast.parse(source))
    found = []

    def walk(table: symtable.SymbolTable, owner: symtable.SymbolTable | None) -> None:
        if table.get_type() == "function" and table.get_name() not in COMPREHENSIONS:
            owner = table  # a def or a lambda; a comprehension belongs to the function it is written in
        if owner is not None:
            for symbol in table.get_symbols():
                name = symbol.get_name()
                if symbol.is_referenced() and symbol.is_global() and name not in allowed and not name.isupper():
                    found.append((owner.get_name(), owner.get_lineno(), name))
        for child in table.get_children():
            walk(child, owner)

    walk(symtable.symtable(source, filename, "exec"), None)
    return found


def test_the_check_finds_a_module_global_read_by_a_function_and_allows_the_rest():
    source = ("import streamlit as st\nfrom x import y\nLIMIT = 3\nstate = y()\ncfg = state.cfg\n"
              "def helper(a):\n    return a + LIMIT\n"
              "def part(ctx):\n    st.write(ctx, helper(1), len([cfg.n for _ in range(2)]))\n"
              "def callback():\n    inner = lambda: state.x\n    return inner\n"
              "class Box:\n    pass\n"
              "def ok(ctx):\n    local = ctx.trace\n    return [Box() for _ in local], (lambda v: v + local)(1)\n"
              "part(state)\n")
    assert sorted((f, n) for f, _, n in hidden_parameters(source)) == [("lambda", "state"), ("part", "cfg")]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_function_reads_a_module_global_as_a_hidden_parameter(page):
    found = hidden_parameters(page.read_text(encoding="utf-8"), str(page))
    assert not found, f"{page.name}: functions read module-level variables: {found}"


def test_every_page_is_in_one_section_of_the_sidebar_and_a_page_not_written_yet_is_left_out(tmp_path):
    from viz_ui.app.navigation import PAGES as NAV, SECTIONS, Section, present
    listed = [row[0] for section in SECTIONS for row in section.pages]
    assert len(listed) == len(set(listed)), listed  # a page in one section only
    assert {p.relative_to(ROOT).as_posix() for p in PAGES} <= set(listed)  # every page file is in the sidebar
    assert [row[0] for row in NAV] == [f for f in listed if (ROOT / f).is_file()] and NAV[0][0] == "app.py"
    # a listed file that is not there (a page being written) is left out, and so is a section left without pages
    (tmp_path / "pages").mkdir()
    for name in ("app.py", "pages/a.py"):
        (tmp_path / name).write_text("", encoding="utf-8")
    sections = (Section("One", "i", (("app.py", "Start", "i"), ("pages/soon.py", "Soon", "i"))),
                Section("Two", "i", (("pages/later.py", "Later", "i"),)),
                Section("Three", "i", (("pages/a.py", "A", "i"),)))
    assert [(s.heading, [row[0] for row in s.pages]) for s in present(sections, tmp_path)] == [
        ("One", ["app.py"]), ("Three", ["pages/a.py"])]
