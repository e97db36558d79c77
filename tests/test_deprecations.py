"""No page calls a deprecated Streamlit API: a run of every page emits no DeprecationWarning (nor a pending or future
one) and logs or shows no Streamlit deprecation notice ("... will be removed after ...").

pyproject.toml's pytest settings ignore Streamlit's DeprecationWarnings elsewhere in the suite; these tests record
every warning themselves, and read Streamlit's loggers directly (they do not propagate to pytest's capture)."""

from __future__ import annotations

import contextlib
import logging
import re
import warnings

from streamlit.testing.v1 import AppTest

from conftest import ROOT

NOTICE = re.compile(r"deprecat|will be removed", re.IGNORECASE)
DEPRECATIONS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
PAGES = ["app.py", *sorted(f"pages/{path.name}" for path in (ROOT / "pages").glob("*.py"))]


class _Notices(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if NOTICE.search(record.getMessage()):
            self.seen.append(f"{record.name}: {record.getMessage()}")


@contextlib.contextmanager
def deprecation_notices():
    """Collect, while the block runs, every deprecation warning (Python's ``warnings``, whatever filters are set) and
    every message of a Streamlit logger that reads like a deprecation notice, as lines of text in the list yielded."""
    handler, seen = _Notices(), []
    loggers = [logging.getLogger("streamlit"), *(logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
                                                 if name.startswith("streamlit."))]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield seen
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    seen += handler.seen
    seen += [f"{w.category.__name__} ({w.filename}:{w.lineno}): {w.message}" for w in caught
             if issubclass(w.category, DEPRECATIONS)]


def _deprecated_call() -> None:
    import streamlit.components.v1 as components

    components.html("<p>an old call</p>")


def test_the_check_sees_a_deprecated_streamlit_call():
    with deprecation_notices() as seen:
        at = AppTest.from_function(_deprecated_call).run()
    assert not at.exception
    assert any("components.v1.html" in line and "will be removed" in line for line in seen), seen


def test_no_page_run_prints_a_deprecation_notice():
    """Every page (the start page and each file of pages/), run once on the shipped model: no deprecation warning,
    no Streamlit deprecation notice in its logs, none shown on the page."""
    with deprecation_notices() as seen:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
        for page in PAGES:
            if page != "app.py":
                at.switch_page(page).run()
            assert not at.exception, (page, [e.value for e in at.exception])
            shown = [w.value for w in at.warning if NOTICE.search(str(w.value))]
            assert not shown, (page, shown)
    assert seen == []


def test_no_module_imports_the_deprecated_components_v1_html():
    """The source itself: Streamlit's deprecated components-v1 ``html`` function (replaced by ``st.iframe``) is called
    nowhere outside tests (``git grep`` finds its dotted name nowhere)."""
    calls = []
    for folder in ("viz_ui", "viz_model", "pages", "scripts", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if "components.v1" in text or "components.html(" in text:
                calls.append(str(path.relative_to(ROOT)))
    calls += [name for name in ("app.py", "serve.py") if "components.v1" in (ROOT / name).read_text(encoding="utf-8")]
    assert calls == []
