"""The app's pages, in the order of the pipeline: the sidebar's navigation (:mod:`viz_ui.app.layout`) and class mode's
page switch (:mod:`viz_ui.classroom.follow`) read this one table."""

import functools
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parents[2]  # the folder of app.py and pages/

PAGES = [  # (file, label, icon): the order follows the pipeline
    ("app.py", "Start", ":material/home:"),
    ("pages/walkthrough.py", "Guided walkthrough", ":material/route:"),
    ("pages/tokens.py", "1 · Tokens", ":material/text_fields:"),
    ("pages/embeddings.py", "2 · Embeddings & positions", ":material/scatter_plot:"),
    ("pages/attention.py", "3 · Attention", ":material/visibility:"),
    ("pages/head_steps.py", "3a · One head, step by step", ":material/calculate:"),
    ("pages/head_view.py", "3b · Head view", ":material/share:"),
    ("pages/heads.py", "3c · Head summaries", ":material/grid_view:"),
    ("pages/block.py", "3d · Residual stream & feed-forward", ":material/stacks:"),
    ("pages/logit_lens.py", "3e · Logit lens", ":material/layers:"),
    ("pages/moe.py", "3f · Mixture of experts", ":material/hub:"),
    ("pages/features.py", "3g · Features (sparse dictionaries)", ":material/dictionary:"),
    ("pages/output.py", "4 · Output probabilities", ":material/bar_chart:"),
    ("pages/interventions.py", "4a · Cause and effect (ablation, patching, attribution)", ":material/science:"),
    ("pages/steering.py", "4b · Steering & feature ablation", ":material/tune:"),
    ("pages/encoder_decoder.py", "5 · Encoder-decoder & cross-attention", ":material/swap_horiz:"),
    ("pages/timeline.py", "6 · Watch it learn (training timeline)", ":material/timelapse:"),
    ("pages/inspector.py", "Model inspector & upload", ":material/memory:"),
    ("pages/train.py", "Train your own", ":material/model_training:"),
]

@functools.cache
def page_links() -> list[tuple[st.Page, str]]:
    """``(page, label)`` for each row of :data:`PAGES`, for the sidebar's ``st.page_link``: ``st.Page`` objects made
    once per process, in the first run that asks (a page needs the run's context), by absolute path (a test runs a
    page as its main script). Given a path, ``st.page_link`` resolves it on disk (``os.path.realpath``) and searches
    the app's pages at every call: 19 links cost 8–10 ms of server CPU per run, every student's every run in a class
    (``bench/class_live.py``); given the page, it only checks that it is the one registered. Each ``Page`` has its
    file's own URL path (``app.py``, the default page, as Streamlit's own), so both have the same page hash."""
    return [(st.Page(ROOT / path, title=label, icon=icon, default=path == PAGES[0][0]), label)
            for path, label, icon in PAGES]
