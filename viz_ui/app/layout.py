"""The shared page setup: sidebar navigation, model and text choice, URL state, figure display."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import plotly.graph_objects as go
import streamlit as st
import torch
from tokenizers import Tokenizer

from viz_model import CheckpointError, VizTransformer
from viz_model.loading.dtypes import dtype_name
from viz_model.tokenizer import IdTokenizer

from viz_ui.app.navigation import PAGES, page_links, section_of  # PAGES: the pages read it from here
from viz_ui.classroom.ui import check_applied, class_bar, publish_view, question_area, sidebar_controls
from viz_ui.classroom.session import current_page
from viz_ui.views.export import figure_csv, trace_npz
from viz_ui.views.figure_spec import FigureSpec
from viz_ui.views.figures import style_for_display
from viz_ui.views.tables import markdown_table
from viz_ui.app.live_chart import Frames, clicked_point, csv_link, live_chart
from viz_ui.app.state import available_models, get_salient_head, get_trace, resolve
from viz_ui.analysis.interventions import Head, head_name, parse_heads
from viz_ui.analysis.text import plain
from viz_ui.analysis.text_trace import Trace

APP_NAME = "Inside a Transformer"
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [line.strip() for line in (ROOT / "assets" / "examples.txt").read_text(encoding="utf-8").splitlines()
            if line.strip()]
MAX_CHARS = 20_000


@dataclass
class Display:
    """How the page is drawn: lecture mode, font scale, theme, and the toolbar's figure download format."""

    lecture: bool = False
    scale: float = 1.0
    theme: str = "light"  # "light" (high contrast) or "dark"
    export: str = "png"  # "png" (3x) or "svg"
    css_theme: bool = False  # the theme is drawn by our CSS because Streamlit itself draws the other one


# Streamlit draws its own light or dark theme (.streamlit/config.toml; the user's Settings menu; a link with
# embed_options=dark_theme). The page's CSS lives beside this file: base.css on every page, dark.css when the app's
# theme (the sidebar's choice, or ?theme= in a link) is dark and Streamlit draws the light one (it paints the dark
# theme over it, element by element), lecture.css in lecture mode. What depends on the display is set by one line of
# CSS custom properties before them: --viz-caption-ink (captions' grey) and --viz-scale (lecture font scale).
def _stylesheet(name: str) -> str:
    """``name``.css beside this file, without its comments and line breaks (every script run sends the page's CSS:
    in the dark theme 7.8 KB with them, 5.5 KB without). The files break lines only after ``,``, ``;``, ``{``, ``}``."""
    text = (Path(__file__).with_name(f"{name}.css")).read_text(encoding="utf-8")
    return re.sub(r"\s*\n\s*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


CSS = {name: _stylesheet(name) for name in ("base", "dark", "lecture")}
CAPTION_INK = {"light": "#4a4d57", "dark": "#c4c6cc"}  # 4.5:1 or more on each theme's background


def _truthy(value) -> bool:
    return str(value).lower() in ("1", "true", "yes")


def native_theme() -> str:
    """The theme Streamlit itself draws in this browser ("light" or "dark"): config, Settings menu or link."""
    try:
        kind = st.context.theme.type
    except AttributeError:  # Streamlit before 1.46
        kind = None
    return kind if kind in ("light", "dark") else "light"


CLASSROOM_PANEL = "classroom_panel"  # the Classroom expander's key: its state is whether it is open


def _display_controls() -> Display:
    """The Classroom expander: display settings, then class mode's controls. Lazy: its widgets are drawn only while
    it is open (opening it reruns the page); closed, their values and link parameters are kept all the same. Every
    run of every page (a class's every student at every change of the teacher's) then sends one element here
    instead of six to a dozen, four of them shared widgets (bench/class_live.py)."""
    native = native_theme()
    panel = st.sidebar.expander("Classroom", icon=":material/school:", key=CLASSROOM_PANEL, on_change="rerun")
    with panel:
        drawn = bool(panel.open)
        lecture = shared_widget(st.toggle, "Lecture mode", key="lecture", default=False, cast=_truthy, draw=drawn,
                                help="Large fonts and figures, fewer controls, the sidebar folded away: for a "
                                     "projector. Open the sidebar again with the » button at the top left.")
        scale = shared_widget(st.slider, "Font scale", 1.0, 2.5, key="scale", default=1.5, draw=drawn,
                              valid=lambda v: 1.0 <= v <= 2.5, cast=float, step=0.25, disabled=not lecture)
        theme = shared_widget(st.radio, "Theme", ["light", "dark"], key="theme", default=native, draw=drawn,
                              valid=("light", "dark").__contains__, horizontal=True, link_default="light",
                              format_func={"light": "high-contrast light", "dark": "dark"}.get)
        export = shared_widget(st.radio, "Figure download (toolbar camera)", ["png", "svg"], key="export",
                               default="png", valid=("png", "svg").__contains__, horizontal=True, draw=drawn,
                               format_func={"png": "PNG (3×)", "svg": "SVG"}.get)
        sidebar_controls(drawn)  # class mode: start, join, the code and QR code, questions (viz_ui/classroom)
    return Display(lecture, scale if lecture else 1.0, theme, export, css_theme=theme == "dark" and native != "dark")


def _apply_display(display: Display) -> None:
    css = (f":root{{--viz-caption-ink:{CAPTION_INK[display.theme]};--viz-scale:{display.scale:g}}}" + CSS["base"]
           + (CSS["dark"] if display.css_theme else "") + (CSS["lecture"] if display.lecture else ""))
    st.html(f"<style>{css}</style>")


@dataclass
class AppState:
    """What every page works from: the chosen model, the text, and the model's trace of it."""

    model_name: str
    model_path: str  # the model's key: a path, or "upload:<hash>" for a model uploaded in this session
    model: VizTransformer
    tokenizer: Tokenizer  # or an IdTokenizer when the checkpoint has none (the text is token ids)
    text: str
    trace: Trace | None  # None when the text is empty
    link_slot: object = None  # sidebar placeholder for "Link to this view", refreshed by show_link
    display: Display = field(default_factory=Display)
    shown_link: str = ""  # the link show_link last drew in this run (redrawn only when it changes)


def view_link(page_url: str, params: dict[str, str]) -> str:
    """The address that reopens the current view: the page's address with the view state as query string."""
    return page_url.split("?", 1)[0] + ("?" + urlencode(params) if params else "")


def show_link(state: AppState) -> None:
    """(Re)draw "Link to this view" from the current ``st.query_params`` (call after the page's widgets); a class's
    teacher publishes the view to the class when it changed."""
    publish_view(first=not state.shown_link)
    if state.link_slot is not None:
        # a class's teacher key (teach=…) stays in the address bar only: not in a link shown on a projected screen
        link = view_link(st.context.url or "", {k: v for k, v in st.query_params.to_dict().items() if k != "teach"})
        if link == state.shown_link:
            return  # every element sent costs the browser a render: pages call this after each figure
        state.shown_link = link
        # one element replaced in place (no new container): the output page redraws it from inside a fragment
        state.link_slot.code(link, language=None, wrap_lines=True)


def shared_widget_key(key: str, default, valid=lambda value: True, cast=str) -> str:
    """Prepare the session-wide widget ``key`` and return it; pass ``on_change=remember, args=(key,)``.

    Streamlit forgets a widget's value when the page changes, so the value lives in our own key
    ``_key``: first taken from the link (``cast(st.query_params[key])``, or from the link the session
    was opened with, so that ``head=3`` survives a first page without a head selector) when valid,
    else ``default``, then copied back into the widget on every run. See docs/ARCHITECTURE.md, "Pages and navigation".
    """
    st.session_state[key] = _shared(key, default, valid, cast)
    return key


def _shared(key: str, default, valid, cast):
    """The session-wide value of ``key`` (kept in ``_key``; see :func:`shared_widget_key`)."""
    ss = st.session_state
    if "_link" not in ss:  # the link the session was opened with: pages that come later read their values from it
        ss["_link"] = st.query_params.to_dict()
    if "_" + key not in ss:
        try:
            value = cast(st.query_params[key] if key in st.query_params else ss["_link"][key])
        except (KeyError, ValueError):
            value = default
        ss["_" + key] = value if valid(value) else default
    elif not valid(ss["_" + key]):
        ss["_" + key] = default  # e.g. a layer index that the newly chosen model does not have
    return ss["_" + key]


def shared_value(key: str, default, valid=lambda value: True, cast=str):
    """A value shared by every page and kept in the link under ``key``, as :func:`shared_widget` keeps a widget's,
    for a control that is not a Streamlit widget (a custom component, which changes it with :func:`set_shared`)."""
    value = _shared(key, default, valid, cast)
    write_param(key, str(value), default)
    return value


def shared_widget(widget, *args, key: str, default, valid=lambda value: True, cast=str, link_default=None,
                  to_link=None, draw: bool = True, **kwargs):
    """Draw ``widget(*args, **kwargs)`` (e.g. ``st.slider``, ``column.selectbox``) with a value shared by every
    page and kept in the link under ``key`` (see :func:`shared_widget_key`); return the value. The link holds
    the value only when it differs from ``link_default`` (default: ``default``); ``to_link``: how the value is
    written there (e.g. a list as ``"a,b"``; ``cast`` reads it back), default ``str``. ``draw=False``: the value
    and the link are kept, the widget is not drawn (a closed lazy expander's content, :func:`_display_controls`)."""
    if draw:
        value = widget(*args, key=shared_widget_key(key, default, valid, cast), on_change=remember, args=(key,),
                       **kwargs)
    else:
        value = _shared(key, default, valid, cast)
    shown = to_link(value) if to_link else str(value).lower() if isinstance(value, bool) else str(value)
    default = default if link_default is None else link_default
    write_param(key, shown, to_link(default) if to_link else default)
    return value


MAX_LINK_CHARS = 2_000  # a value longer than this (URL-encoded) is not written into the link (issue 14)


def write_param(key: str, shown: str, default) -> None:
    """Keep ``key`` in the address bar: only when it differs from its default (links stay short), and only when
    it fits (a 20,000-character text would make an address the server refuses with HTTP 400)."""
    default_shown = str(default).lower() if isinstance(default, bool) else str(default)
    too_long = len(urlencode({key: shown})) > MAX_LINK_CHARS
    if shown == default_shown or too_long:
        if key in st.query_params:
            del st.query_params[key]
        st.session_state[f"_unlinked_{key}"] = too_long
    elif st.query_params.get(key) != shown:  # each write sends the browser a message, even when unchanged
        st.query_params[key] = shown
        st.session_state[f"_unlinked_{key}"] = False


def remember(key: str) -> None:
    """on_change callback: keep the widget's new value for the other pages and the link."""
    st.session_state["_" + key] = st.session_state[key]


def set_shared(key: str, value: str) -> None:
    """Change a shared value from code (e.g. a button that appends generated text)."""
    st.session_state["_" + key] = value


def get_shared(key: str, default=None):
    """The session's current value of the shared ``key`` (as :func:`set_shared` or its widget left it), or
    ``default`` when no page has drawn it yet."""
    return st.session_state.get("_" + key, default)


# ---- the shared selections' public setters: a click callback changes a selection through these -----------------

def set_layer_head(layer: int, head: int) -> None:
    """Select ``layer`` and ``head`` in the shared ``layer`` and ``head`` selectors (:func:`pick_layer_head`)."""
    set_shared("layer", int(layer))
    set_shared("head", int(head))


def set_position(position: int) -> None:
    """Select the token ``position`` in the shared ``query`` selector (:func:`pick_position`)."""
    set_shared("query", int(position))


def set_ablated_heads(heads) -> None:
    """Switch off exactly ``heads`` (``(layer, head)`` pairs) in the shared ``ablate`` selector
    (:func:`pick_ablated_heads`); the order does not matter."""
    set_shared("ablate", [head_name(*h) for h in sorted({(int(a), int(b)) for a, b in heads})])


def pick_ablated_heads(container, n_layers: int, n_heads: int, **kwargs) -> tuple[Head, ...]:
    """The shared "Heads switched off" multiselect (kept in the link as ``ablate=L0H1,L2H3``): the chosen heads as
    sorted ``(layer, head)`` pairs, a hashable value for the cached functions' keys. ``kwargs`` go to
    ``container.multiselect``."""
    names = [head_name(l, h) for l in range(n_layers) for h in range(n_heads)]

    def as_names(value) -> list[str]:  # a head list, or its link form "L0H1,L2H3", as sorted names
        text = ",".join(value) if isinstance(value, list) else str(value)
        return [head_name(*h) for h in parse_heads(text, n_layers, n_heads)]

    chosen = shared_widget(container.multiselect, "Heads switched off", names, key="ablate", default=[],
                           cast=as_names, valid=lambda v: isinstance(v, list) and set(v) <= set(names),
                           to_link=lambda v: ",".join(as_names(v)), **kwargs)
    return tuple(parse_heads(",".join(chosen), n_layers, n_heads))


def _use_example() -> None:
    set_shared("text", st.session_state["example"])
    st.session_state["example"] = None  # so that the same example can be picked again after an edit


def _sidebar(models: dict[str, str]) -> tuple[str, str]:
    default_model = next(iter(models))
    with st.sidebar:
        st.markdown(f"### {APP_NAME}")
        name = shared_widget(st.selectbox, "Model", list(models), key="model", default=default_model,
                             valid=models.__contains__,
                             help="Shipped models (with model cards on the Start page), installed real models, models "
                                  "given with --model, and your uploads (Model inspector page; this session only).")
        text = shared_widget(st.text_area, "Text", key="text", default=EXAMPLES[0],
                             cast=lambda v: str(v)[:MAX_CHARS], height=150, max_chars=MAX_CHARS,
                             help="Press Ctrl+Enter (or click outside) to run the model on the new text.")
        st.selectbox("…or start from an example", EXAMPLES, index=None, key="example", on_change=_use_example,
                     placeholder="Choose an example")
        _navigation()
    return name, (text or "")[:MAX_CHARS]


NAV_KEY = "viz_nav"  # the navigation's container: its CSS class is st-key-viz_nav


def _navigation() -> None:
    """The pages, in the sections of :data:`viz_ui.app.navigation.SECTIONS`, below the text (docs/ui.md): each
    section an expander, open where the running page is listed, folded elsewhere. The browser draws a new page's
    sidebar anew (its sections as ``expanded`` says), and keeps a section the user opened or folded through the
    reruns of the same page (seen in Chromium with Streamlit 1.67; tests/test_browser.py)."""
    here = section_of(current_page())
    with st.container(key=NAV_KEY):  # base.css draws the sections compact by this key's class
        for section, links in page_links():
            with st.expander(section.heading, expanded=section.heading == here, icon=section.icon):
                for page, label, _ in links:
                    st.page_link(page, label=label)


def setup_page(title: str, intro: str) -> AppState:
    """Draw the page header and sidebar; load the model and run it on the text.

    Stops the page with a clear message (never a traceback) when the model cannot be loaded or the
    text is empty.
    """
    # A local icon file: a ":material/...:" page icon is fetched from Google's font CDN, which breaks offline use.
    lecture = _truthy(st.session_state.get("_lecture", st.query_params.get("lecture", "")))
    st.set_page_config(page_title=f"{title} · {APP_NAME}", page_icon=str(ROOT / "assets" / "icon.png"), layout="wide",
                       initial_sidebar_state="collapsed" if lecture else "auto")
    check_applied()  # a student's screen: did the teacher's last view arrive? (before any widget writes the link)
    models = available_models()
    if not models:
        st.error("No model found in assets/models. Train one with `python -m viz_model.training` (docs/training.md).")
        st.stop()
    name, text = _sidebar(models)
    display = _display_controls()
    _apply_display(display)
    class_bar()  # a class's banner above the page, and a student's poll of the teacher's view
    st.sidebar.caption("Link to this view (model, text, page and selections):")
    if st.session_state.get("_unlinked_text"):
        st.sidebar.caption(f":material/link_off: The text is too long for a link (over {MAX_LINK_CHARS:,} characters "
                           "once encoded): the link below reopens the page, model and settings, not the text.")
    link_slot = st.sidebar.empty()
    st.title(title)
    st.caption(intro)
    try:
        model, tokenizer = resolve(models[name])
    except CheckpointError as exc:
        st.error(f"The model {plain(name)} cannot be loaded: {plain(str(exc))}. Choose another model in the sidebar.")
        st.stop()
    if model.dtype != torch.float32 or model.device.type != "cpu":  # the numbers' precision, where it differs
        st.sidebar.caption(f":material/memory: {dtype_name(model.dtype)} weights on {model.device.type}: values are the "
                           "model's own, shown as float32; norms, attention scores and patterns computed in float32.")
    if isinstance(tokenizer, IdTokenizer):  # the checkpoint came without a tokenizer
        st.info("This checkpoint has no tokenizer: type **token ids** separated by spaces (e.g. `464 3290 318`), "
                "or upload its tokenizer.json on the Model inspector page.", icon=":material/pin:")
    trace = None
    if not text.strip():
        st.info("The text is empty: type a sentence in the sidebar to see what the model computes for it.")
    else:
        try:
            trace = get_trace(models[name], text)
        except ValueError as exc:  # e.g. words typed for a model without tokenizer: pages needing a trace stop
            st.error(f"The text cannot be run: {plain(str(exc))}.")
    if trace is not None:
        if not display.lecture:
            st.sidebar.download_button("Whole trace (.npz)", data=lambda: trace_npz(trace), icon=":material/download:",
                                       file_name=f"{_file_stem(name)}_trace.npz", mime="application/octet-stream",
                                       help="Every hook's values for this text (hook name → array), for numpy.load.")
        if trace.cut_message:  # the context or the memory budget (VIZ_ATTN_BUDGET_MB) cut the text
            st.warning(trace.cut_message, icon=":material/content_cut:")
    if model.cfg.is_encoder_decoder and title != "Encoder-decoder & cross-attention":
        st.caption(":material/swap_horiz: Encoder-decoder model: this page shows the **decoder** stack over its own "
                   "output tokens (the source is read by the encoder); page 5 shows the encoder and cross-attention.")
    state = AppState(name, models[name], model, tokenizer, text, trace, link_slot, display)
    show_link(state)
    question_area(state, show_figure)  # a class's current question, on every page (its reveal is a figure)
    return state


def _file_stem(name: str) -> str:
    """A model name made safe for a download's file name."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def pick_index(container, label: str, key: str, n: int, default: int = 0, format_func=str) -> int:
    """A selector of ``0 .. n - 1`` shared by every page and kept in the link under ``key``."""
    return shared_widget(container.selectbox, label, range(n), key=key, default=default,
                         valid=lambda v: 0 <= v < n, cast=int, format_func=format_func)


def shared_number(widget, label: str, key: str, lo, hi, default, cast, **kwargs):
    """A number widget (e.g. ``column.slider``, ``column.number_input``) whose value is shared by every page
    and kept in the link under ``key``; a value from the link outside ``[lo, hi]`` falls back to ``default``."""
    return shared_widget(widget, label, lo, hi, key=key, default=default, valid=lambda v: lo <= v <= hi, cast=cast,
                         **kwargs)


def pick_layer_head(state: AppState, layer_col, head_col) -> tuple[int, int]:
    """Layer and head selectors (kept in the link as ``layer`` and ``head``). Until the user picks one they open
    on the most salient head for the text (:func:`viz_ui.views.overview.salient_head`), not on layer 0 head 0."""
    cfg = state.model.cfg
    layer, head = 0, 0
    # two ``in`` tests, not ``set(st.session_state)``: iterating the session state builds every value, and each
    # custom component's value is presented through a class Streamlit creates anew for it (a GC cycle per chart)
    if state.trace is not None and not ("_layer" in st.session_state and "_head" in st.session_state):
        layer, head = get_salient_head(state.model_path, state.text)
    return (pick_index(layer_col, "Layer", "layer", cfg.n_layers, layer),
            pick_index(head_col, "Head", "head", cfg.n_heads, head))


def pick_position(container, trace: Trace, label: str) -> int:
    """A token-position selector (default: the last token), kept in the link as ``query``."""
    n = trace.n_tokens
    return pick_index(container, label, "query", n, n - 1, lambda i: f"{i} {trace.labels[i]}")


MATRIX_CELLS = 65_536  # a [pos × d] heatmap draws at most this many cells (256 × 256), hover labels included
SQUARE_SIDE = 128  # a [pos × pos] heatmap (one head, similarities) draws at most this many positions


def needs_window(trace: Trace, width: int | None = None) -> bool:
    """Whether a heatmap over the trace's positions (``width`` columns, or square when None) is windowed."""
    size = SQUARE_SIDE if width is None else max(16, MATRIX_CELLS // max(1, width))
    return trace.n_tokens > size


def window_around(n: int, centre: int, size: int = SQUARE_SIDE) -> tuple[int, int]:
    """The ``size`` positions ``(start, stop)`` of ``0 .. n - 1`` around ``centre`` (all ``n`` when they fit): the
    window :func:`position_window` draws, without its note."""
    if n <= size:
        return 0, n
    start = min(max(0, centre - size // 2), n - size)
    return start, start + size


def position_window(container, trace: Trace, width: int | None = None, centre: int | None = None) -> tuple[int, int]:
    """The positions ``(start, stop)`` a heatmap over positions draws: all of them when they fit, otherwise a
    window around ``centre``, or around the position chosen in the shared ``query`` selector (drawn here, only
    then, when ``centre`` is None: call it once per page that way), with a note.
    ``width``: columns of a ``[pos × width]`` matrix; None for a square ``[pos × pos]`` one."""
    n = trace.n_tokens
    if not needs_window(trace, width):
        return 0, n
    size = SQUARE_SIDE if width is None else max(16, MATRIX_CELLS // max(1, width))
    if centre is None:
        centre = pick_position(container, trace, "Window around position")
    start, _ = window_around(n, centre, size)
    container.caption(f":material/crop: {n} tokens are too many to draw at once here: positions {start}–{start + size - 1} "
                      f"around the selected position {centre} are shown. The CSV under the figure has those rows; "
                      "the whole trace is in the .npz download.")
    return start, start + size


def require_trace(state: AppState) -> Trace:
    """The trace, or stop the page (the empty-text or bad-text message is already shown)."""
    if state.trace is None:
        st.stop()
    return state.trace


def show_table(data, state: AppState, height: int | None = None, fmt: str | dict | None = None, **kwargs) -> None:
    """Show a table (a DataFrame, or anything ``pd.DataFrame`` takes); ``fmt``: the numbers' format, one for every
    numeric column (``"{:.4f}"``) or one per column name (``{"probability": "{:.4f}"}``), as ``Styler.format``.

    Normally an interactive ``st.dataframe`` (sorting, its own CSV toolbar), which shows text as it is. In lecture
    mode, and whenever the app's theme differs from the theme Streamlit itself draws with (the dataframe grid is drawn
    on a canvas in Streamlit's colours, which CSS cannot reach), a static HTML ``st.table`` instead: it scales with the
    lecture font, follows the theme's colours and has no download toolbar; it renders every cell and header as
    Markdown, so they go through :func:`viz_ui.views.tables.markdown_table`. ``height`` (px) then bounds a scrolled
    box; ``hide_index`` holds for both, the other ``kwargs`` (``column_config``, …) for the interactive table only.
    """
    if state.display.lecture or state.display.css_theme:
        box = st.container(height=height) if height else st.container()
        box.table(markdown_table(data, fmt), hide_index=kwargs.get("hide_index"))
    else:
        import pandas as pd
        if fmt is not None:
            data = (data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)).style.format(fmt)
        st.dataframe(data, height=height or "auto", **kwargs)


def show_code(state: AppState, view: str, source, what: str = "checkpoint and text") -> None:
    """"Export as code": the Python ``source`` that reproduces a view's numbers with the project's public API, shown
    and downloadable as ``{view}.py`` (hidden in lecture mode, like every download). ``source``: the script, or a
    function returning it (called only when shown). ``what``: what the script starts from, for the caption."""
    if state.display.lecture:
        return
    with st.expander("Export as code", icon=":material/code:"):
        st.caption(f"This script reproduces the numbers above from the same {what} with the project's public API, "
                   "and prints them.")
        source = source() if callable(source) else source
        st.code(source, language="python")
        st.download_button("Download the script (.py)", source, file_name=f"{view}.py", mime="text/x-python",
                           key=f"code_{view}", icon=":material/download:")


def side_by_side(state: AppState, spec) -> list:
    """Columns for figures shown next to each other (``spec``: a count, or relative widths as ``st.columns``
    takes them), or as many stacked containers in lecture mode, where side-by-side figures would be narrower
    than readable on a projector."""
    if state.display.lecture:
        return [st.container() for _ in range(spec if isinstance(spec, int) else len(spec))]
    return st.columns(spec)


def show_figure(fig: go.Figure | FigureSpec, state: AppState, view: str, data=None, select_key: str | None = None,
                on_select=None, styled: bool = False, live: str | None = None, frames: Frames | None = None,
                ahead=None) -> None:
    """Render a figure with a PNG/SVG export in its toolbar and a CSV of its data, named after the model
    and view (a "Data (CSV)" link drawn by the live chart where the app is served with :mod:`viz_ui.app.downloads`'
    route, else a ``st.download_button``; none in lecture mode). ``data``: a callable returning the DataFrame to
    export, when the figure's own cells are not the best table (e.g. tiled or pooled figures); by default
    :func:`figure_frame` of the figure.
    ``select_key`` and ``on_select``: a clickable figure (Streamlit point selection under that widget key; the
    callback reads :func:`selected_points` of ``select_key``). ``styled``: the figure was built styled for
    this display (``viz_ui.views.figures.one_pass_figure`` with ``display=(scale, theme)``), not to be styled again.
    Every figure is a live chart (:mod:`viz_ui.app.live_chart`): it stays in the page and a rerun updates it in place
    (``Plotly.react``), where ``st.plotly_chart`` would draw a changed figure anew, twice (issue 26; bench/latency.py).
    ``live``: the chart's key, by default ``select_key``, else ``chart_{view}``; give one that stays the same when
    ``view`` names a choice (a layer, a head), so that another choice updates the chart instead of drawing a new one.
    A click calls ``on_select``. ``frames``: the chart follows a step scrubber in the browser
    (:class:`viz_ui.app.live_chart.Frames`, built styled as ``fig``); ``fig`` is then the figure of the server's step
    (shown where live charts cannot be drawn, and the CSV's source). ``fig`` may be a
    :class:`viz_ui.views.figure_spec.FigureSpec`: a figure named by what it is built from, built and written once per
    server for all the sessions that show it (a class following its teacher), and built again for a CSV. Where this
    server cannot draw live charts (static serving off), the figure is shown with ``st.plotly_chart``, clickable
    under ``select_key`` (or ``live``). ``ahead``: a function of a new text that returns the figure this call would
    show for it, so that the chart is drawn ahead of the rerun (:data:`viz_ui.app.live_chart.Ahead`)."""
    d = state.display
    filename = f"{_file_stem(state.model_name)}_{view}"
    config = {"displaylogo": False, "displayModeBar": not d.lecture,
              "toImageButtonOptions": {"format": d.export, "scale": 3 if d.export == "png" else 1, "filename": filename}}
    # as Streamlit's own charts: clicks select (no box or lasso), no upload to Plotly's cloud
    live_config = dict(config, modeBarButtonsToRemove=["lasso2d", "select2d", "sendChartToCloud"])
    live = live or select_key or f"chart_{view}"
    csv = None if d.lecture else (
        (lambda: figure_csv(fig.figure() if isinstance(fig, FigureSpec) else fig)) if data is None
        else (lambda: data().to_csv(index=False)))
    in_chart = csv is not None and csv_link()  # the chart draws its own link: no button (viz_ui.app.downloads)
    if live_chart(fig, live_config, live, on_click=on_select, frames=frames,
                  style=None if styled else (d.scale, d.theme), ahead=ahead,
                  csv=(csv, f"{filename}.csv") if in_chart else None) is None:
        in_chart = False
        fig = fig.figure() if isinstance(fig, FigureSpec) else fig
        if not styled:
            style_for_display(fig, d.scale, d.theme)
        select_key = select_key or (live if on_select else None)
        if select_key:
            st.plotly_chart(fig, theme=None, config=config, key=select_key, on_select=on_select, selection_mode="points")
        else:
            st.plotly_chart(fig, theme=None, config=config)
    if csv is not None and not in_chart:
        st.download_button("Data (CSV)", data=csv, file_name=f"{filename}.csv", mime="text/csv",
                           key=f"csv_{view}", type="tertiary", icon=":material/download:")
    show_link(state)


def selected_points(key: str) -> list[dict]:
    """The points selected or clicked in the figure shown by :func:`show_figure` with ``select_key`` (or ``live``)
    ``key``, as Plotly reports them (``curve_number``, ``point_index``, …); read it in the ``on_select`` callback."""
    value = st.session_state.get(key)
    if value is None:
        return []
    selection = getattr(value, "selection", None)
    if selection is not None:  # st.plotly_chart
        return list(selection.points)
    click = clicked_point(key)
    return [click] if click else []
