// A Plotly chart that stays in the page and is updated in place (Plotly.react) when the server sends it a new
// figure: Streamlit's own Plotly element draws every changed figure as a new chart, twice (viz_ui/live_chart.py).
// Plotly's code is the plotly Python package's own plotly.min.js, served by this app (app/static/), loaded once per
// browser tab and shared by every live chart.

function loadPlotly(src) {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (!window.__vizPlotly) {
    window.__vizPlotly = new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = new URL(src, document.baseURI).href;
      script.onload = () => (window.Plotly ? resolve(window.Plotly) : reject(new Error("no Plotly in " + src)));
      script.onerror = () => {
        window.__vizPlotly = undefined; // the next figure tries again
        script.remove();
        reject(new Error("Plotly's code could not be loaded from " + src));
      };
      document.head.appendChild(script);
    });
  }
  return window.__vizPlotly;
}

// Streamlit's charts have a fullscreen button in their mode bar; so do these (Font Awesome's "expand" and
// "compress" icons, CC BY 4.0, as Streamlit's)
const EXPAND = {width: 448, height: 512, path: "M32 32C14.3 32 0 46.3 0 64v96c0 17.7 14.3 32 32 32s32-14.3 32-32V96h64c17.7 0 32-14.3 32-32s-14.3-32-32-32H32zM64 352c0-17.7-14.3-32-32-32s-32 14.3-32 32v96c0 17.7 14.3 32 32 32h96c17.7 0 32-14.3 32-32s-14.3-32-32-32H64V352zM320 32c-17.7 0-32 14.3-32 32s14.3 32 32 32h64v64c0 17.7 14.3 32 32 32s32-14.3 32-32V64c0-17.7-14.3-32-32-32H320zM448 352c0-17.7-14.3-32-32-32s-32 14.3-32 32v64H320c-17.7 0-32 14.3-32 32s14.3 32 32 32h96c17.7 0 32-14.3 32-32V352z"};
const COMPRESS = {width: 448, height: 512, path: "M160 64c0-17.7-14.3-32-32-32s-32 14.3-32 32v64H32c-17.7 0-32 14.3-32 32s14.3 32 32 32h96c17.7 0 32-14.3 32-32V64zM32 320c-17.7 0-32 14.3-32 32s14.3 32 32 32H96v64c0 17.7 14.3 32 32 32s32-14.3 32-32V352c0-17.7-14.3-32-32-32H32zM352 64c0-17.7-14.3-32-32-32s-32 14.3-32 32v96c0 17.7 14.3 32 32 32h96c17.7 0 32-14.3 32-32s-14.3-32-32-32H352V64zM320 320c-17.7 0-32 14.3-32 32v96c0 17.7 14.3 32 32 32s32-14.3 32-32V384h64c17.7 0 32-14.3 32-32s-14.3-32-32-32H320z"};

function withScreen(div, layout) {
  // in fullscreen the chart fills the screen; otherwise the figure's own height and the column's width
  return document.fullscreenElement === div ? {...layout, width: window.innerWidth, height: window.innerHeight} : layout;
}

function fullscreenButton(div) {
  const full = document.fullscreenElement === div;
  return {
    name: full ? "Close fullscreen" : "Fullscreen",
    title: full ? "Close fullscreen" : "Fullscreen",
    icon: full ? COMPRESS : EXPAND,
    click: () => (full ? document.exitFullscreen() : div.requestFullscreen()),
  };
}

function merge(layout, update) {
  // layout updated as plotly.py's update_layout does: nested objects merged, anything else replaced
  const out = {...layout};
  for (const [key, value] of Object.entries(update || {})) {
    const plain = v => v && typeof v === "object" && !Array.isArray(v);
    out[key] = plain(value) && plain(out[key]) ? merge(out[key], value) : value;
  }
  return out;
}

function paths(update, prefix = "", out = {}) {
  // the same update as Plotly.relayout's attribute paths ("title.text"): nested objects kept, lists replaced
  for (const [key, value] of Object.entries(update || {})) {
    if (value && typeof value === "object" && !Array.isArray(value)) paths(value, `${prefix}${key}.`, out);
    else out[prefix + key] = value;
  }
  return out;
}

function draw(Plotly, div) {
  const {figure, config, revision, update} = div.__vizShown;
  const buttons = config.displayModeBar === false ? [] : [fullscreenButton(div)];
  // a new revision tells Plotly that the data arrays changed; the same one, that they did not (nothing recomputed)
  const layout = {...withScreen(div, merge(figure.layout, update)), datarevision: revision};
  return Plotly.react(div, figure.data, layout, {...config, modeBarButtonsToAdd: buttons});
}

export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
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
    div.addEventListener("fullscreenchange", () => window.Plotly && draw(window.Plotly, div));
  }
  div.__vizSend = setTriggerValue; // clicks go through the latest mount's callbacks
  const shown = div.__vizShown;
  // the same figure with another update (the step's marks on a figure that is otherwise the same): only relayout
  const same = shown && shown.revision === data.revision && JSON.stringify(shown.config) === JSON.stringify(data.config);
  const figure = same ? shown.figure : JSON.parse(data.figure);
  div.style.minHeight = `${figure.layout.height || 450}px`; // no jump while Plotly's code loads
  const token = (div.__vizToken = (div.__vizToken || 0) + 1);
  loadPlotly(data.src)
    .then(Plotly => {
      if (div.__vizToken !== token) return; // a newer figure arrived meanwhile
      const drawn = same && div.__vizDrawn === data.revision;
      div.__vizShown = {figure, config: data.config, revision: data.revision, update: data.update};
      return (drawn ? Plotly.relayout(div, paths(data.update)) : draw(Plotly, div)).then(() => {
        div.__vizDrawn = data.revision;
        if (data.clickable && !div.__vizClick) {
          div.__vizClick = true;
          div.on("plotly_click", event => {
            const p = event.points[0];
            div.__vizSend("click", { curve_number: p.curveNumber, point_index: p.pointIndex, x: p.x, y: p.y });
          });
        }
        div.dataset.vizRevision = data.revision; // which figure is drawn (read by the browser tests)
      });
    })
    .catch(error => {
      div.textContent = `This figure cannot be drawn: ${error.message}`;
    });
  return () => {
    div.__vizResize.disconnect();
    if (window.Plotly) window.Plotly.purge(div);
  };
}
