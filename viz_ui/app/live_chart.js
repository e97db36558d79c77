// A Plotly chart that stays in the page and is updated in place (Plotly.react) when the server sends it a new
// figure: Streamlit's own Plotly element draws every changed figure as a new chart, twice (viz_ui/app/live_chart.py).
// A chart with frames follows a step scrubber (viz_ui/scrubber.js) in the browser: the scrubber announces its step
// on a channel (window.__vizSteps[channel] and a "viz-step" event) and the chart draws that step's frame at once.
// A chart may follow a Streamlit slider the same way (data.follow: the output page's temperature).
// Plotly's code is the plotly Python package's own plotly.min.js, served by this app (app/static/), loaded once per
// browser tab and shared by every live chart.

// loadPlotly(src): viz_ui/app/plotly_loader.js, put before this file (viz_ui/app/live_chart.py)

// Streamlit's charts have a fullscreen button in their mode bar; so do these (Font Awesome's "expand" and
// "compress" icons, CC BY 4.0, as Streamlit's)
const EXPAND = {width: 448, height: 512, path: "M32 32C14.3 32 0 46.3 0 64v96c0 17.7 14.3 32 32 32s32-14.3 32-32V96h64c17.7 0 32-14.3 32-32s-14.3-32-32-32H32zM64 352c0-17.7-14.3-32-32-32s-32 14.3-32 32v96c0 17.7 14.3 32 32 32h96c17.7 0 32-14.3 32-32s-14.3-32-32-32H64V352zM320 32c-17.7 0-32 14.3-32 32s14.3 32 32 32h64v64c0 17.7 14.3 32 32 32s32-14.3 32-32V64c0-17.7-14.3-32-32-32H320zM448 352c0-17.7-14.3-32-32-32s-32 14.3-32 32v64H320c-17.7 0-32 14.3-32 32s14.3 32 32 32h96c17.7 0 32-14.3 32-32V352z"};
const COMPRESS = {width: 448, height: 512, path: "M160 64c0-17.7-14.3-32-32-32s-32 14.3-32 32v64H32c-17.7 0-32 14.3-32 32s14.3 32 32 32h96c17.7 0 32-14.3 32-32V64zM32 320c-17.7 0-32 14.3-32 32s14.3 32 32 32H96v64c0 17.7 14.3 32 32 32s32-14.3 32-32V352c0-17.7-14.3-32-32-32H32zM352 64c0-17.7-14.3-32-32-32s-32 14.3-32 32v96c0 17.7 14.3 32 32 32h96c17.7 0 32-14.3 32-32s-14.3-32-32-32H352V64zM320 320c-17.7 0-32 14.3-32 32v96c0 17.7 14.3 32 32 32s32-14.3 32-32V384h64c17.7 0 32-14.3 32-32s-14.3-32-32-32H320z"};

function withScreen(div, layout) {
  // in fullscreen the chart fills the screen; otherwise the figure's own height and the column's width
  return document.fullscreenElement === div ? {...layout, width: window.innerWidth, height: window.innerHeight} : layout;
}

function fullscreenButton(div) {
  // the same object at every draw in the same state: Plotly.react compares the config by identity (a new click
  // function is a changed config, and a changed config is a full new plot: 50-60 ms instead of 15-20 for a 64 x 64
  // heatmap in the app's page, bench/latency.py)
  const full = document.fullscreenElement === div;
  div.__vizButtons = div.__vizButtons || {};
  if (!div.__vizButtons[full]) {
    div.__vizButtons[full] = {
      name: full ? "Close fullscreen" : "Fullscreen",
      title: full ? "Close fullscreen" : "Fullscreen",
      icon: full ? COMPRESS : EXPAND,
      click: () => (full ? document.exitFullscreen() : div.requestFullscreen()),
    };
  }
  return div.__vizButtons[full];
}

const plain = v => v && typeof v === "object" && !Array.isArray(v) && !("bdata" in v);

function merge(base, update) {
  // ``base`` updated as plotly.py's update_layout does: nested objects merged, anything else (lists, typed arrays)
  // replaced
  const out = {...base};
  for (const [key, value] of Object.entries(update || {})) {
    out[key] = plain(value) && plain(out[key]) ? merge(out[key], value) : value;
  }
  return out;
}

function paths(update, prefix = "", out = {}) {
  // the same update as Plotly.relayout's attribute paths ("title.text"): nested objects kept, lists replaced
  for (const [key, value] of Object.entries(update || {})) {
    if (plain(value)) paths(value, `${prefix}${key}.`, out);
    else out[prefix + key] = value;
  }
  return out;
}

function followedSlider(follow) {
  // the Streamlit slider a chart follows: its range input, found by its label
  for (const input of document.querySelectorAll('input[type="range"][aria-label]')) {
    if (input.getAttribute("aria-label") === follow.label) return input;
  }
  return null;
}

function stepOf(div) {
  // the step this chart shows: the followed slider's value as it is in the page now, else the scrubber's (announced
  // on its channel), else the server's
  const shown = div.__vizShown;
  if (shown.follow) {
    const input = followedSlider(shown.follow);
    const value = input ? parseFloat(input.value) : NaN;
    return Number.isFinite(value) ? Math.round((value - shown.follow.origin) / shown.follow.step) : shown.index;
  }
  const steps = window.__vizSteps || {};
  return shown.channel && shown.channel in steps ? steps[shown.channel] : shown.index;
}

function watchSliders() {
  // A chart may follow a Streamlit slider (the output page's temperature): the slider's input shows its new value
  // (aria-valuetext) as soon as it moves, long before the server's rerun; its channel is announced then, and the
  // charts that follow it draw that value's frame. One observer for the page.
  if (window.__vizSliders) return;
  window.__vizSliders = new MutationObserver(records => {
    const labels = new Set();
    for (const record of records) {
      const label = record.target.getAttribute && record.target.getAttribute("aria-label");
      if (label && record.target.type === "range") labels.add(label);
    }
    for (const label of labels) window.dispatchEvent(new CustomEvent("viz-slider", {detail: {label}}));
  });
  window.__vizSliders.observe(document.body, {subtree: true, attributes: true, attributeFilter: ["aria-valuetext"]});
}

function frameOf(shown, index) {
  const k = index - shown.first;
  return shown.frames && k >= 0 && k < shown.frames.length ? shown.frames[k] : null;
}

// Margins held from one drawing to the next. The figures leave the room for their tick labels, axis titles, colour
// bar and title to Plotly (automargin, small margins of their own); Plotly draws the whole chart, measures those
// texts, and when they need other margins than the figure's, draws the whole chart again with them: every drawing
// of a token heatmap was two (page 3's head heatmap at 64 tokens: 92 ms, 51-54 ms with margins that fit already,
// bench/heatmap_draw.py). So a chart is drawn with the margins of its last drawing: a new text whose labels fit them
// is drawn once, and the plot does not jump while one types. Labels that need more still get it (Plotly grows the
// margins and draws again, as before), and a side that had to grow gets HEADROOM_PX more for the next drawing (a
// side that Plotly sized from the figure's own margins, SLACK_PX), so that labels a few pixels wider fit too.
// Margins wider than the texts need by more than SPARE_PX (shorter labels) are fitted at the next idle moment, off the
// path from a keystroke to the chart: drawn with the figure's own margins, which Plotly sizes to the texts. The
// margins are held by chart key for the tab: a page opened again draws its charts once too.
const HEADROOM_PX = 10;
const SLACK_PX = 4; // after a drawing with the figure's own margins, on the sides the texts pushed: a colour bar's
// margin moves by a pixel or two with the other side's
const SPARE_PX = 24;
const SIDES = ["l", "r", "t", "b"];

function ownMargins(layout) {
  const own = {};
  for (const side of SIDES) own[side] = Number.isFinite((layout.margin || {})[side]) ? layout.margin[side] : 0;
  return own;
}

function marginKey(layout, full) {
  // held margins fit the same figure drawn at the same font size, height and screen only
  return JSON.stringify([layout.margin || null, layout.height || null, (layout.font || {}).size || null, full]);
}

// The margins each chart (by its key) was last drawn with, for the tab.
const MARGINS_BY_CHART = window.__vizMarginsByChart = window.__vizMarginsByChart || new Map();

function heldMargins(div, layout, full) {
  // the margins to draw with, or null: the figure's own (a first drawing; another font size, height or screen)
  const held = MARGINS_BY_CHART.get(div.__vizShown.chart);
  return held && held.key === marginKey(layout, full) ? held : null;
}

function needed(full, own) {
  // the margins the chart's texts ask for, at least the figure's own, from Plotly's margin pushes as its doAutoMargin
  // works each out against the other side's margin: a push of ``size`` px at ``val`` (where the text's anchor stands,
  // as a fraction of the plot: a y axis at 0, a colour bar at 1.02, an axis moved inwards by a square plot's
  // constraint at 0.3) needs (size - across * val) / (1 - val) px on the left or bottom, and
  // (size - across * (1 - val)) / val on the right or top, ``across`` being the figure's width (height) less the
  // other side's margin. Plotly weighs pushes in pairs, so this is close, not exact: it only tells margins far too
  // wide (SPARE_PX).
  const out = {...own};
  const across = {l: full.width - full._size.r, r: full.width - full._size.l,
                  b: full.height - full._size.t, t: full.height - full._size.b};
  for (const [id, push] of Object.entries(full._pushmargin || {})) {
    if (id === "base") continue;
    for (const side of SIDES) {
      const p = push[side];
      if (!p || !Number.isFinite(p.size) || !Number.isFinite(p.val)) continue;
      const near = side === "l" || side === "b" ? 1 - p.val : p.val; // the text's anchor from the far edge
      if (near <= 0.01) continue;
      out[side] = Math.max(out[side], (p.size - across[side] * (1 - near)) / near);
    }
  }
  return out;
}

function keepMargins(div, layout, full, asked) {
  // after a drawing with the margins ``asked`` (null: the figure's own): the margins Plotly drew with, held for the
  // next drawing (with headroom on a side that had to grow); when they were held and are far wider than the texts
  // need now, the chart is drawn again with its own margins at the next idle moment
  const fullLayout = div._fullLayout;
  if (!fullLayout || !fullLayout._size) return;
  const drawn = fullLayout._size;
  const size = {};
  const own = ownMargins(layout);
  for (const side of SIDES) {
    const grew = asked ? drawn[side] > asked[side] + 1 : drawn[side] > own[side];
    size[side] = drawn[side] + (!grew ? 0 : asked ? HEADROOM_PX : SLACK_PX);
  }
  const chart = div.__vizShown.chart;
  const held = {key: marginKey(layout, full), size, text: JSON.stringify(size)};
  MARGINS_BY_CHART.set(chart, held);
  if (!asked) return; // Plotly sized these margins to the texts itself
  const need = needed(fullLayout, own);
  if (!SIDES.some(side => drawn[side] - need[side] > SPARE_PX)) return;
  const idle = window.requestIdleCallback || (task => setTimeout(task, 200));
  idle(() => {
    if (MARGINS_BY_CHART.get(chart) === held && div.isConnected) {
      MARGINS_BY_CHART.delete(chart);
      redraw(div);
    }
  }, {timeout: 2000});
}

function draw(Plotly, div) {
  // the whole figure with the frame of its step; the frame's layout only when nothing else changed since
  const shown = div.__vizShown;
  const index = shown.frames ? stepOf(div) : null;
  const frame = shown.frames ? frameOf(shown, index) : null;
  const waiting = Boolean(shown.frames) && !frame; // a step the server has not sent yet: the last one stays, faded
  div.classList.toggle("viz-live-waiting", waiting);
  if (waiting && div.__vizDrawn) return Promise.resolve();
  const full = document.fullscreenElement === div;
  const layout = merge(shown.figure.layout, frame ? frame.layout : null);
  const margins = heldMargins(div, layout, full);
  const now = {revision: shown.revision, frames: shown.framesRevision, full, step: frame ? index : null,
               margins: margins ? margins.text : null};
  const last = div.__vizDrawn;
  const same = last && last.revision === now.revision && last.frames === now.frames && last.full === now.full
    && last.margins === now.margins;
  div.__vizDrawn = now;
  if (same && last.step === now.step) return Promise.resolve();
  // another step of a chart whose frames change its layout only (the losses' marks): moved, not drawn again
  if (same && last.step !== null && frame && !frame.data) return Plotly.relayout(div, paths(frame.layout));
  const {figure, config} = shown;
  const data = frame && frame.data ? figure.data.map((t, k) => (frame.data[k] ? {...t, ...frame.data[k]} : t)) : figure.data;
  const buttons = config.displayModeBar === false ? [] : [fullscreenButton(div)];
  // a new data revision tells Plotly that the arrays changed; the same one, that they did not (nothing recomputed)
  const revision = `${shown.revision}:${frame && frame.data ? index : ""}`;
  const drawn = margins ? {...layout, margin: {...layout.margin, ...margins.size}} : layout;
  return Plotly.react(div, data, {...withScreen(div, drawn), datarevision: revision},
                      {...config, modeBarButtonsToAdd: buttons})
    .then(() => keepMargins(div, layout, full, margins && margins.size));
}

function redraw(div) {
  // draw the latest state once Plotly is here and the last drawing is done (a step that moved meanwhile is drawn
  // next, the ones in between skipped)
  if (div.__vizBusy) {
    div.__vizAgain = true;
    return;
  }
  div.__vizBusy = true;
  loadPlotly(div.__vizShown.src)
    .then(Plotly => draw(Plotly, div).then(() => {
      const shown = div.__vizShown;
      if (shown.clickable && !div.__vizClick) {
        div.__vizClick = true;
        div.on("plotly_click", event => {
          const p = event.points[0];
          div.__vizSend("click", {curve_number: p.curveNumber, point_index: p.pointIndex, x: p.x, y: p.y});
        });
      }
    }))
    .catch(error => {
      div.textContent = `This figure cannot be drawn: ${error.message}`;
      div.__vizDrawn = undefined;
    })
    .finally(() => {
      div.__vizBusy = false;
      if (div.__vizAgain) {
        div.__vizAgain = false;
        redraw(div);
      }
    });
}

// Charts the server sent are drawn one per frame, those in view first: the browser paints each as soon as it is
// drawn, instead of after every chart of the rerun (a rerun of page 3 redraws seven; the one the user looks at
// waited for all of them, bench/latency.py). Step changes and fullscreen are drawn at once.
const pending = new Set();
let draining = false;

function drainOne() {
  const divs = [...pending].filter(div => div.isConnected);
  pending.clear();
  if (!divs.length) {
    draining = false;
    return;
  }
  const next = divs.find(div => div.__vizInView !== false) || divs[0];
  for (const div of divs) if (div !== next) pending.add(div);
  redraw(next);
  // the next one after the browser has shown this one: a task queued at once ran before the frame, and the chart
  // drawn stayed unseen while the next was drawn (40-80 ms a chart; bench/latency.py)
  requestAnimationFrame(() => setTimeout(drainOne, 0));
}

function schedule(div) {
  pending.add(div);
  if (!draining) {
    draining = true;
    setTimeout(drainOne, 0);
  }
}

// Drawn ahead of the rerun (viz_ui/app/ahead.py): a chart registered with a function of the text (data.ahead, its
// token) is sent each newly submitted text of the sidebar's Text box, and the server answers with the figure its rerun
// will send for that text, drawn as soon as it comes. The rerun's own figure then has the same revision and is not
// drawn again. An answer that comes after the rerun sent the chart anything new is dropped: the server's figure
// always wins. On Ctrl+Enter the text reaches Streamlit once the answer is drawn (or after AHEAD_WAIT_MS, or at the
// next key or change in the box): the keydown is held from Streamlit and given to it again then, so that the server
// computes the answer without the rerun beside it and the browser draws it without the rerun's hundred messages to
// render first (typing → attention at 64 tokens: ~400 ms with both at once, bench/latency.py). Leaving the box
// (Streamlit's other way to submit) is not held.
const TEXT_BOX = 'textarea[aria-label="Text"]';
const AHEAD_WAIT_MS = 1500;

function drawAhead(div, text) {
  // a promise, resolved once the answer is drawn (its drawing started) or dropped
  const shown = div.__vizShown;
  if (!shown || !shown.ahead || div.__vizAheadText === text) return Promise.resolve();
  div.__vizAheadText = text;
  const head = div.__vizHead;
  const ask = (div.__vizAheadAsk || 0) + 1;
  div.__vizAheadAsk = ask;
  return fetch(new URL(shown.aheadUrl, document.baseURI), {
    method: "POST", headers: {"Content-Type": "application/json"}, credentials: "same-origin", cache: "no-store",
    body: JSON.stringify({token: shown.ahead, text}),
  })
    .then(response => (response.status === 200
      ? response.text().then(figure => [response.headers.get("X-Viz-Revision"), figure]) : null))
    .then(got => {
      // the latest question only, and only while the server has sent this chart nothing since it was asked
      if (!got || !got[0] || ask !== div.__vizAheadAsk || head !== div.__vizHead || !div.isConnected) return;
      const [revision, figure] = got;
      if (revision === div.__vizShown.revision) return;
      div.__vizShown = {...div.__vizShown, figure: JSON.parse(figure), revision};
      redraw(div);
    })
    .catch(() => {}); // nothing drawn ahead: the rerun draws the chart as before
}

let handing = false; // a keydown we give to Streamlit ourselves

function handOver(box, event) {
  // the held Ctrl+Enter, given to Streamlit's own handlers (React listens at its root for bubbling events)
  if (!box.isConnected) return;
  handing = true;
  try {
    box.dispatchEvent(new KeyboardEvent("keydown", {key: "Enter", code: "Enter", keyCode: 13, which: 13, bubbles: true,
      cancelable: true, ctrlKey: event.ctrlKey, metaKey: event.metaKey, shiftKey: event.shiftKey, altKey: event.altKey}));
  } finally {
    handing = false;
  }
}

let holding = null; // the held Ctrl+Enter's hand-over, while one is held
const MODIFIERS = new Set(["Control", "Meta", "Shift", "Alt"]); // change nothing in the box (and repeat when held)

function watchTextBox() {
  // the tab's listeners, in the capture phase: before Streamlit's own handlers
  if (window.__vizAheadWatch) return;
  window.__vizAheadWatch = true;
  const inBox = event => Boolean(event.target.matches && event.target.matches(TEXT_BOX));
  document.addEventListener("keydown", event => {
    if (handing || !inBox(event)) return;
    // any other key in the box while a Ctrl+Enter is held: the held one goes first, so that Streamlit submits the
    // text as it was at that Ctrl+Enter, not with what is typed after it
    if (holding && !MODIFIERS.has(event.key)) holding();
    if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey)) return;
    const box = event.target;
    const charts = [...document.querySelectorAll(".viz-live-chart")]
      .filter(div => div.__vizShown && div.__vizShown.ahead && div.__vizAheadText !== box.value);
    if (!charts.length) return; // nothing to draw ahead: Streamlit's as usual
    event.stopImmediatePropagation();
    event.preventDefault();
    const give = () => {
      if (holding === give) {
        holding = null;
        handOver(box, event);
      }
    };
    holding = give;
    setTimeout(give, AHEAD_WAIT_MS);
    Promise.all(charts.map(div => drawAhead(div, box.value))).then(give, give);
  }, {capture: true});
  // a change without a key (pasted with the mouse, dropped, composed): the held Ctrl+Enter goes first too
  document.addEventListener("beforeinput", event => { if (holding && inBox(event)) holding(); }, {capture: true});
  // leaving the box submits its text when it changed (Streamlit's rule): asked for too, nothing held
  document.addEventListener("focusin", event => { if (inBox(event)) event.target.__vizFocusText = event.target.value; },
                            {capture: true});
  document.addEventListener("focusout", event => {
    if (!inBox(event) || event.target.value === event.target.__vizFocusText) return;
    for (const div of document.querySelectorAll(".viz-live-chart")) drawAhead(div, event.target.value);
  }, {capture: true});
}

function unpack(raw, head, end) {
  // live_chart.py's pack: one line of JSON (head, ending at byte end), then the texts it names (figure, frames) one
  // after the other, as bytes
  const decoder = new TextDecoder();
  const data = JSON.parse(head);
  let at = end + 1;
  for (const [name, length] of data.parts) {
    data[name] = decoder.decode(raw.subarray(at, at + length));
    at += length;
  }
  return data;
}

// Material Symbols' "download" icon (Apache-2.0), as Streamlit's download buttons show it
const DOWNLOAD_ICON = '<svg viewBox="0 -960 960 960" aria-hidden="true"><path d="M480-320 280-520l56-58 104 ' +
  '104v-326h80v326l104-104 56 58-200 200ZM240-160q-33 0-56.5-23.5T160-240v-120h80v120h480v-120h80v120q0 33-23.5 ' +
  '56.5T720-160H240Z"/></svg>';

function csvLink(parentElement, csv) {
  // "Data (CSV)" under the chart: a link to the figure's data (viz_ui/app/downloads.py), where the server gives one
  let link = parentElement.querySelector(":scope > .viz-csv");
  if (!csv) {
    if (link) link.hidden = true;
    return;
  }
  if (!link) {
    link = document.createElement("a");
    link.className = "viz-csv";
    link.innerHTML = `${DOWNLOAD_ICON}<span>Data (CSV)</span>`;
    link.title = "Download the figure's data as a CSV file";
    parentElement.appendChild(link);
  }
  link.href = new URL(csv.url, document.baseURI).href;
  link.download = csv.name;
  link.hidden = false;
}

export default function (component) {
  const {parentElement, setTriggerValue} = component;
  const raw = component.data;
  let div = parentElement.querySelector(":scope > .viz-live-chart");
  if (!div) {
    div = document.createElement("div");
    div.className = "viz-live-chart";
    div.dataset.testid = "vizLiveChart";
    parentElement.appendChild(div);
    // Plotly follows the window's size; the column's width also changes when the sidebar opens or closes
    let width = 0;
    div.__vizResize = new ResizeObserver(entries => {
      const w = Math.round(entries[0].contentRect.width);
      if (w && w !== width && div._fullLayout) window.Plotly.Plots.resize(div);
      width = w;
    });
    div.__vizResize.observe(div);
    div.__vizView = new IntersectionObserver(entries => { div.__vizInView = entries[entries.length - 1].isIntersecting; });
    div.__vizView.observe(div);
    div.addEventListener("fullscreenchange", () => redraw(div));
    div.__vizOnStep = event => {
      const shown = div.__vizShown;
      if (shown && shown.channel && event.detail.channel === shown.channel) redraw(div);
    };
    window.addEventListener("viz-step", div.__vizOnStep);
    div.__vizOnSlider = event => {
      const shown = div.__vizShown;
      if (shown && shown.follow && event.detail.label === shown.follow.label) redraw(div);
    };
    window.addEventListener("viz-slider", div.__vizOnSlider);
    watchSliders();
  }
  div.__vizSend = setTriggerValue; // clicks go through the latest mount's callbacks
  // the header names the figure and frames by their revisions: the same header is the same data, already drawn
  // (Streamlit compares a component's JSON data by value and calls again only on a change; bytes are a new object
  // at every run)
  const end = raw.indexOf(10);
  const head = new TextDecoder().decode(raw.subarray(0, end));
  if (head === div.__vizHead && div.__vizShown) return div.__vizCleanup;
  div.__vizHead = head;
  div.__vizAheadText = undefined; // the server has spoken: the next submitted text is asked for again
  const data = unpack(raw, head, end);
  csvLink(parentElement, data.csv);
  const shown = div.__vizShown;
  const figure = shown && shown.revision === data.revision ? shown.figure : JSON.parse(data.figure);
  const frames = !data.frames ? null
    : shown && shown.framesRevision === data.framesRevision ? shown.frames : JSON.parse(data.frames);
  div.style.minHeight = `${figure.layout.height || 450}px`; // no jump while Plotly's code loads
  // the export options (their file name names the view: a layer, a head, a temperature) go in one object per chart,
  // changed in place: Plotly reads them at the click, and its react would take a new object for a changed config
  // and draw the whole chart anew (a bar chart: 45-55 ms instead of 15, at every move of the temperature)
  div.__vizImage = div.__vizImage || {};
  for (const name of Object.keys(div.__vizImage)) delete div.__vizImage[name];
  Object.assign(div.__vizImage, data.config.toImageButtonOptions || {});
  const config = {...data.config, toImageButtonOptions: div.__vizImage};
  div.__vizShown = {figure, config, src: data.src, revision: data.revision, clickable: data.clickable,
                    channel: data.channel, index: data.index, first: data.first, frames,
                    framesRevision: data.framesRevision, follow: data.follow, chart: data.chart,
                    ahead: data.ahead, aheadUrl: data.aheadUrl};
  if (data.ahead) watchTextBox();
  if (shown && JSON.stringify(shown.config) !== JSON.stringify(config)) div.__vizDrawn = undefined;
  schedule(div);
  return (div.__vizCleanup = () => {
    div.__vizHead = undefined;
    pending.delete(div);
    div.__vizResize.disconnect();
    div.__vizView.disconnect();
    window.removeEventListener("viz-step", div.__vizOnStep);
    window.removeEventListener("viz-slider", div.__vizOnSlider);
    if (window.Plotly) window.Plotly.purge(div);
  });
}
