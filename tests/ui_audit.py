"""In-browser audits of a rendered page, for the browser tests and bench/: text contrast (WCAG 2.1), the colours of
surfaces, widths, horizontal scrolling, the sidebar's position, downloads, mode bars and the titles under them. Each
function takes a Playwright page."""

from __future__ import annotations

import re


def luminance(rgb: str) -> float:
    """WCAG relative luminance of a CSS rgb() colour."""
    channels = [int(c) / 255 for c in re.findall(r"[\d.]+", rgb)[:3]]
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two CSS rgb() colours."""
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


# The colour behind an element: the backgrounds of it and its ancestors up to the first opaque one, blended over a
# white page; out of open shadow roots (custom components) to their hosts.
BACKGROUND_JS = r"""
  const parse = c => { const m = c.match(/rgba?\(([^)]+)\)/); if (!m) return null;
    const p = m[1].split(',').map(Number); return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; };
  const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const blend = (top, under) => ({r: top.r * top.a + under.r * (1 - top.a), g: top.g * top.a + under.g * (1 - top.a),
    b: top.b * top.a + under.b * (1 - top.a), a: 1});
  // up the tree, out of a shadow root (a custom component's) to its host
  const up = e => e.parentElement || (e.getRootNode() instanceof ShadowRoot ? e.getRootNode().host : null);
  const background = el => {
    const layers = [];
    const thumbValue = el.closest('[data-testid=stSliderThumbValue]');  // drawn above the thumb, not on it
    for (let e = thumbValue ? thumbValue.parentElement.parentElement : el; e; e = up(e)) {
      if (e.getAttribute('role') === 'slider') continue;  // a slider's value is drawn above its thumb, not on it
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c.a > 0) { layers.push(c); if (c.a >= 0.99) break; }
    }
    let bg = {r: 255, g: 255, b: 255, a: 1};
    for (let i = layers.length - 1; i >= 0; i--) bg = blend(layers[i], bg);
    return bg;
  };
"""

# For every visible element that holds text of its own: its colour and the colour behind it (BACKGROUND_JS), and the
# WCAG contrast ratio; texts in open shadow roots (custom components) too.
CONTRAST_JS = r"""
(wholePage) => {""" + BACKGROUND_JS + r"""
  const out = [];
  const seen = new Set();
  const roots = [document.body, ...[...document.querySelectorAll('*')].filter(e => e.shadowRoot).map(e => e.shadowRoot)];
  for (const root of roots) {
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || seen.has(el) || !n.textContent.trim()) continue;
    seen.add(el);
    if (el.closest('.js-plotly-plot, svg, [aria-hidden=true], script, style, noscript, iframe')) continue;
    const st = getComputedStyle(el);
    const r = el.getBoundingClientRect();
    if (st.visibility === 'hidden' || st.display === 'none' || r.width < 1 || r.height < 1) continue;
    if (r.right < 0 || r.left > innerWidth) continue;  // off screen sideways (a folded sidebar)
    if (!wholePage && (r.bottom < 0 || r.top > innerHeight)) continue;
    let opacity = 1;  // the element's and its ancestors' opacity fade its text towards the background
    for (let e = el; e; e = up(e)) opacity *= parseFloat(getComputedStyle(e).opacity);
    if (opacity < 0.05) continue;
    const fg = parse(st.color); if (!fg) continue;
    fg.a *= opacity;
    const bg = background(el);
    const col = fg.a < 1 ? blend(fg, bg) : fg;
    const l1 = lum(col), l2 = lum(bg);
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    const tid = el.closest('[data-testid]');
    out.push({text: n.textContent.trim().slice(0, 40), ratio: Math.round(ratio * 100) / 100,
              color: st.color, testid: tid ? tid.getAttribute('data-testid') : '', tag: el.tagName,
              disabled: !!el.closest('[disabled], [aria-disabled=true]')});
  }
  }
  return out;
}
"""

LAYOUT_JS = r"""
() => {
  const sb = document.querySelector('[data-testid=stSidebar]');
  const main = document.querySelector('[data-testid=stMainBlockContainer]') || document.querySelector('.block-container');
  const figs = [...document.querySelectorAll('.js-plotly-plot')].map(f => f.getBoundingClientRect().width);
  const sr = sb ? sb.getBoundingClientRect() : null;
  const toggle = document.querySelector('[data-testid=stExpandSidebarButton], [data-testid=stSidebarCollapsedControl] button');
  const tr = toggle ? toggle.getBoundingClientRect() : null;
  return {
    width: innerWidth, scrollWidth: document.documentElement.scrollWidth,
    sidebar: sr ? {left: sr.left, right: sr.right, width: sr.width, expanded: sb.getAttribute('aria-expanded')} : null,
    toggle: tr ? {width: tr.width, height: tr.height, visible: tr.width > 4 && tr.height > 4} : null,
    main: main ? main.getBoundingClientRect().width : 0,
    figures: figs,
    downloads: document.querySelectorAll('[data-testid=stDownloadButton]').length,
    modebars: [...document.querySelectorAll('.modebar-container')].filter(m => getComputedStyle(m).display !== 'none'
               && m.querySelector('.modebar')).length,
    toolbars: [...document.querySelectorAll('[data-testid=stElementToolbar]')].filter(t => getComputedStyle(t).display !== 'none').length,
  };
}
"""


# Every visible element matching a selector, and all inside it: the colour behind it (BACKGROUND_JS: what its box shows)
# and that colour's relative luminance. An element inside a clipping box of less than 2 × 2 px (a visually hidden
# button for screen readers) shows nothing and is left out; one scrolled out of view is kept.
SURFACES_JS = r"""
(selector) => {""" + BACKGROUND_JS + r"""
  const hidden = e => {
    for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
      const st = getComputedStyle(a), r = a.getBoundingClientRect();
      if ((st.overflow !== 'visible' || st.clip !== 'auto' || st.clipPath !== 'none') && (r.width < 2 || r.height < 2))
        return true;
    }
    return false;
  };
  const els = [...document.querySelectorAll(selector)].flatMap(e => [e, ...e.querySelectorAll('*')]);
  return els.filter(e => { const r = e.getBoundingClientRect(), st = getComputedStyle(e);
      return r.width >= 1 && r.height >= 1 && st.visibility !== 'hidden' && st.display !== 'none' && !hidden(e); })
    .map(e => { const bg = background(e), tid = e.closest('[data-testid]');
      return {tag: e.tagName, testid: tid ? tid.getAttribute('data-testid') : '', role: e.getAttribute('role') || '',
              chip: !!e.closest('[data-tag]'), background: `rgb(${Math.round(bg.r)}, ${Math.round(bg.g)}, ${Math.round(bg.b)})`,
              luminance: Math.round(lum(bg) * 1000) / 1000}; });
}
"""

# Each Plotly figure's mode bar (its toolbar) and titles (title, subtitle), as boxes: which titles the bar overlaps,
# which stick out of the figure (cut), and which overlap another text of the figure (crowded: a tick label, an
# annotation, a legend entry).
TITLES_JS = r"""
() => [...document.querySelectorAll('.js-plotly-plot')].map(gd => {
  const box = e => { const r = e.getBoundingClientRect(); return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  const fig = box(gd), bar = gd.querySelector('.modebar');
  const titles = [...gd.querySelectorAll('.gtitle, .gtitle-subtitle')].filter(t => (t.textContent || '').trim())
    .map(t => ({text: t.textContent.trim(), ...box(t)}));
  const m = bar ? box(bar) : null;
  const others = [...gd.querySelectorAll('text')].filter(t => !t.closest('.gtitle, .gtitle-subtitle') && (t.textContent || '').trim())
    .map(box).filter(b => b.right > b.left && b.bottom > b.top);  // tick labels, annotations, legend entries
  return {figure: fig, modebar: m, modebarOpacity: bar ? parseFloat(getComputedStyle(bar).opacity) : 0, titles: titles,
          covered: m ? titles.filter(t => t.left < m.right && m.left < t.right && t.top < m.bottom && m.top < t.bottom)
                          .map(t => t.text) : [],
          cut: titles.filter(t => t.left < fig.left - 1 || t.right > fig.right + 1).map(t => t.text),
          crowded: titles.filter(t => others.some(o => t.left < o.right - 1 && o.left < t.right - 1 && t.top < o.bottom - 1
                                                      && o.top < t.bottom - 1)).map(t => t.text)};
})
"""


def surfaces(page, selector: str) -> list[dict]:
    """Every visible element matching the CSS ``selector`` and every one inside it, with the colour its box shows
    (``background``: its own background blended over its ancestors', as :func:`low_contrast` computes it) and that
    colour's WCAG relative ``luminance`` (0 black … 1 white); ``chip``: inside a multiselect's chosen-value chip."""
    return page.evaluate(SURFACES_JS, selector)


def figure_titles(page) -> list[dict]:
    """Each Plotly figure's box, its mode bar's box and opacity, its title boxes, the titles the mode bar covers
    (``covered``), those that stick out of the figure (``cut``) and those that overlap another text of the figure
    (``crowded``)."""
    return page.evaluate(TITLES_JS)


def low_contrast(page, minimum: float = 4.5, whole_page: bool = True) -> list[dict]:
    """Texts whose contrast against what is behind them is below ``minimum`` (disabled widgets excepted, as WCAG
    1.4.3 does): on the whole page, or only in the window when ``whole_page`` is False."""
    return [t for t in page.evaluate(CONTRAST_JS, whole_page) if t["ratio"] < minimum and not t["disabled"]]


def layout(page) -> dict:
    """Window and element widths, the sidebar's box, its open control, downloads, mode bars, toolbars."""
    return page.evaluate(LAYOUT_JS)


def open_select(page, label: str, timeout: float = 60.0):
    """Open the select box labelled ``label`` and return its options (a Playwright locator). A script run that ends
    while the list is open (a fragment's rerun, the page's own run finishing) redraws the box and closes the list,
    so the click is repeated until the options are visible, at most ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    options = page.get_by_role("option")
    while True:
        if not options.first.is_visible():
            page.get_by_label(label, exact=True).click()
        try:
            options.first.wait_for(state="visible", timeout=3_000)
            return options
        except Exception:
            if time.monotonic() > deadline:
                raise


def option_texts(page, label: str, timeout: float = 60.0) -> list[str]:
    """The texts of the options in the select box labelled ``label``, read in one step while the list is open.
    A rerun can close the list between :func:`open_select` and the read (then nothing is read), so the box is
    opened again until a non-empty list is read, at most ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        texts = open_select(page, label, max(1.0, deadline - time.monotonic())).all_inner_texts()
        if texts or time.monotonic() > deadline:
            return texts


def choose_option(page, label: str, option: str, timeout: float = 60.0, chosen=None) -> None:
    """Choose ``option`` (its exact text) in the select box labelled ``label``, retrying as :func:`open_select`
    does when a rerun closes the list between opening it and the click. ``chosen``: a callable that tells when the
    choice has reached the page (e.g. the address has the new value), waited for up to 15 s after each try; without
    it a try is not checked beyond the click (the box may show typed text that no option was chosen for)."""
    import time

    deadline = time.monotonic() + timeout

    def took() -> bool:
        end = time.monotonic() + 15
        while chosen is not None and not chosen():
            if time.monotonic() > end:
                return False
            time.sleep(0.25)
        return True

    while True:
        if time.monotonic() > deadline:
            raise AssertionError(f"{option!r} was not chosen in the select box {label!r} in {timeout} s")
        open_select(page, label, max(1.0, deadline - time.monotonic()))
        try:
            page.get_by_role("option", name=option, exact=True).click(timeout=3_000)
            if took():
                return
            continue  # the browser sent no choice (seen once in 12 runs with a teacher's tick every second)
        except Exception:
            if time.monotonic() > deadline:
                raise
        # the list may open outside the viewport while the page reruns ("element is outside of the viewport"): as a
        # keyboard user would, type the option into the box and press Enter, then check that it was chosen
        box = page.get_by_label(label, exact=True)
        try:
            box.fill(option, timeout=3_000)
            page.keyboard.press("Enter")
            if box.input_value(timeout=3_000) == option and took():
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
