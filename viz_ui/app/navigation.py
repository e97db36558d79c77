"""The app's pages, in sections: the sidebar's navigation (:mod:`viz_ui.app.layout`) and class mode's page switch
(:mod:`viz_ui.classroom.follow`) read this one table.

A page is added with one line in its section of :data:`SECTIONS`. A line whose file does not exist (yet) is left
out of :data:`PAGES` and of the sidebar, so a page being written can be listed before it lands. The numbers in the
labels say where in the model a page looks (1 tokens, 2 embeddings, 3 attention and the blocks, 4 the output and
what causes it, 5 the encoder, 6 training); the pages' own texts refer to them ("page 3a"). The sections say what a
learner does there. docs/ui.md says why the sidebar is laid out as it is.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parents[2]  # the folder of app.py and pages/

Row = tuple[str, str, str]  # (file relative to ROOT, label, icon)


@dataclass(frozen=True)
class Section:
    """A heading of the sidebar's navigation and its pages, in the order shown."""

    heading: str
    icon: str
    pages: tuple[Row, ...]


SECTIONS = (
    Section("Learn the architecture", ":material/school:", (
        ("app.py", "Start", ":material/home:"),
        ("pages/walkthrough.py", "Guided walkthrough", ":material/route:"),
        ("pages/tokens.py", "1 · Tokens", ":material/text_fields:"),
        ("pages/embeddings.py", "2 · Embeddings & positions", ":material/scatter_plot:"),
        ("pages/attention.py", "3 · Attention", ":material/visibility:"),
        ("pages/head_steps.py", "3a · One head, step by step", ":material/calculate:"),
        ("pages/head_view.py", "3b · Head view", ":material/share:"),
        ("pages/block.py", "3d · Residual stream & feed-forward", ":material/stacks:"),
        ("pages/moe.py", "3f · Mixture of experts", ":material/hub:"),
        ("pages/output.py", "4 · Output probabilities", ":material/bar_chart:"),
        ("pages/encoder_decoder.py", "5 · Encoder-decoder & cross-attention", ":material/swap_horiz:"),
    )),
    Section("Inspect a model", ":material/search:", (
        ("pages/heads.py", "3c · Head summaries", ":material/grid_view:"),
        ("pages/logit_lens.py", "3e · Logit lens", ":material/layers:"),
        ("pages/features.py", "3g · Features (sparse dictionaries)", ":material/dictionary:"),
        ("pages/inspector.py", "Model inspector & upload", ":material/memory:"),
    )),
    Section("Cause and effect", ":material/science:", (
        ("pages/interventions.py", "4a · Ablation, patching, attribution", ":material/science:"),
        ("pages/steering.py", "4b · Steering & feature ablation", ":material/tune:"),
        ("pages/circuits.py", "4c · Circuits (attribution graphs)", ":material/account_tree:"),
    )),
    Section("Watch it learn", ":material/timelapse:", (
        ("pages/timeline.py", "6 · Training timeline", ":material/timelapse:"),
        ("pages/train.py", "Train your own", ":material/model_training:"),
    )),
)


def present(sections: tuple[Section, ...], root: Path = ROOT) -> tuple[Section, ...]:
    """``sections`` with only the pages whose file exists under ``root``; a section left without pages is dropped."""
    kept = (Section(s.heading, s.icon, tuple(row for row in s.pages if (root / row[0]).is_file())) for s in sections)
    return tuple(s for s in kept if s.pages)


SHOWN = present(SECTIONS)  # what the sidebar shows: read once, at the server's start
PAGES: list[Row] = [row for section in SHOWN for row in section.pages]  # every page, the start page first


def section_of(page: str, sections: tuple[Section, ...] = SHOWN) -> str | None:
    """The heading of the section that lists ``page`` (a file relative to the app, ``"pages/attention.py"``), or
    None when no section lists it."""
    return next((s.heading for s in sections if any(row[0] == page for row in s.pages)), None)


@functools.cache
def page_links() -> list[tuple[Section, list[tuple[st.Page, str, str]]]]:
    """Each shown section with ``(page, label, file)`` for each of its pages, for the sidebar's ``st.page_link``:
    ``st.Page`` objects made once per process, in the first run that asks (a page needs the run's context), by
    absolute path (a test runs a page as its main script). Given a path, ``st.page_link`` resolves it on disk
    (``os.path.realpath``) and searches the app's pages at every call: 19 links cost 8–10 ms of server CPU per run,
    every student's every run in a class (``bench/class_live.py``); given the page, it only checks that it is the
    one registered. Each ``Page`` has its file's own URL path (``app.py``, the default page, as Streamlit's own), so
    both have the same page hash."""
    return [(section, [(st.Page(ROOT / path, title=label, icon=icon, default=path == PAGES[0][0]), label, path)
                       for path, label, icon in section.pages])
            for section in SHOWN]
