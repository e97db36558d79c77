"""The Streamlit patches (viz_ui/app/streamlit_patches/) are pinned and fenced: the installed Streamlit is the series
they were checked on, the requirements pin that series, every patch finds what it replaces or reads, a patch that
finds nothing is reported (never silently skipped), and only an explicit call puts them in place.

After a Streamlit upgrade these tests fail with a pointer to the package: read docs/streamlit-patches.md."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from conftest import ROOT
from viz_ui.app import streamlit_patches
from viz_ui.app.streamlit_patches import presenter, recover, widget_state

GUIDE = "see viz_ui/app/streamlit_patches/ and docs/streamlit-patches.md"


def test_the_installed_streamlit_is_the_series_the_patches_were_checked_on():
    problem = streamlit_patches.version_problem()
    assert problem is None, f"{problem} ({GUIDE})"


MAJOR, MINOR = streamlit_patches.SERIES
OUTSIDE = (f"{MAJOR}.{MINOR - 1}.99", f"{MAJOR}.{MINOR + 1}.0", f"{MAJOR + 1}.0.0")  # just below, just above, next major


def test_another_series_is_reported_with_a_pointer_to_the_package():
    for version in OUTSIDE:
        problem = streamlit_patches.version_problem(version)
        assert problem is not None and f"Streamlit {version} is installed" in problem
        assert "viz_ui/app/streamlit_patches/" in problem and f"{MAJOR}.{MINOR}.*" in problem
    for version in (f"{MAJOR}.{MINOR}", f"{MAJOR}.{MINOR}.0", f"{MAJOR}.{MINOR}.7"):
        assert streamlit_patches.version_problem(version) is None


def _streamlit_requirements() -> dict[str, Requirement]:
    """The Streamlit requirement of every requirements file at the project's root (ranges and locks alike)."""
    found = {}
    for path in sorted([*ROOT.glob("requirements*.txt"), *ROOT.glob("requirements*.in")]):
        for line in path.read_text(encoding="utf-8").splitlines():
            text = line.split(" #", 1)[0].strip().rstrip("\\").strip()
            if not text or text.startswith(("#", "-")):
                continue
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            if requirement.name.lower() == "streamlit":
                found[path.name] = requirement
    return found


def test_the_requirements_admit_only_the_checked_series():
    found = _streamlit_requirements()
    assert "requirements.txt" in found, found
    checked = Version(streamlit_patches.CHECKED_ON)
    for name, requirement in found.items():
        spec = requirement.specifier
        assert spec.contains(checked), f"{name}: {requirement} excludes {checked}, the release the patches were checked on"
        for outside in OUTSIDE:
            assert not spec.contains(outside), f"{name}: {requirement} admits {outside} ({GUIDE})"


@pytest.mark.parametrize("module", streamlit_patches.PATCHES, ids=lambda m: m.__name__.rpartition(".")[2])
def test_every_patch_finds_what_it_replaces_or_reads(module):
    assert module.problems() == [], f"{module.__file__}: {module.problems()} ({GUIDE})"


def test_a_patch_that_finds_nothing_is_reported_and_not_installed(monkeypatch, caplog):
    """A widget module without the function the patch replaces: install() logs one error naming the module of the
    package and what is gone, installs the other patches, and does not call the broken one's install."""
    import streamlit.elements.widgets.radio as radio

    monkeypatch.delattr(radio, "get_session_state")
    monkeypatch.setattr(streamlit_patches, "_FOUND", None)  # as in a fresh process
    called = []
    for module in streamlit_patches.PATCHES:
        if hasattr(module, "install"):
            monkeypatch.setattr(module, "install", lambda module=module: called.append(module))
    with caplog.at_level(logging.ERROR, logger="viz_ui.app.streamlit_patches"):
        found = streamlit_patches.install()
    assert found == ["viz_ui/app/streamlit_patches/widget_state.py: "
                     "streamlit.elements.widgets.radio.get_session_state is gone"]
    assert widget_state not in called and len(called) == len(streamlit_patches.installed()) - 1
    [record] = [r for r in caplog.records if r.name == "viz_ui.app.streamlit_patches"]
    assert record.levelno == logging.ERROR and found[0] in record.getMessage()
    assert "docs/streamlit-patches.md" in record.getMessage()
    assert streamlit_patches.install() is found  # once per process: later calls return at once


def test_a_changed_upstream_function_or_frontend_message_is_reported(monkeypatch):
    monkeypatch.setattr(presenter, "COPIED_FROM", "0" * 16)  # as if Streamlit's presenter had changed since the copy
    assert [line for line in presenter.problems() if "changed since presenter.py copied it" in line]
    monkeypatch.setattr(recover, "PHRASE", "An error message no Streamlit throws")
    assert len(recover.problems()) == 2  # neither recover.js nor Streamlit's bundle has it


def test_importing_the_app_changes_nothing_and_the_first_page_run_installs_every_patch():
    """In a fresh interpreter: importing every module of viz_ui (as the preload does) patches nothing; running the
    start page (open_page) puts every patch in place."""
    code = ("import importlib, json, pkgutil, viz_ui\n"
            "for m in pkgutil.walk_packages(viz_ui.__path__, 'viz_ui.'):\n"
            "    importlib.import_module(m.name)\n"
            "from viz_ui.app import streamlit_patches\n"
            "before = streamlit_patches.installed()\n"
            "from streamlit.testing.v1 import AppTest\n"
            "at = AppTest.from_file('app.py', default_timeout=300).run()\n"
            "assert not at.exception, [e.value for e in at.exception]\n"
            "print(json.dumps([before, streamlit_patches.installed()]))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, after = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(before) == {"fragment_after_stop", "fragment_from_page_left", "widget_state", "presenter"}
    assert not any(before.values()), before
    assert all(after.values()), after


def test_the_command_line_check_says_all_patches_apply():
    proc = subprocess.run([sys.executable, "-m", "viz_ui.app.streamlit_patches"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"all {len(streamlit_patches.PATCHES)} patches" in proc.stdout
