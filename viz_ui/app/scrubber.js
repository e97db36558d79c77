// A step scrubber (viz_ui/app/scrubber.py): a slider over a run's steps, Play/Pause, the step's readout and numbers.
// A step change is drawn in the browser at once: the scrubber announces the step on its channel
// (window.__vizSteps[channel] and a "viz-step" event on window), live charts with frames redraw from it
// (viz_ui/live_chart.js), and the numbers below the slider are the step's own (sent for every step). The server
// hears of the step when the user pauses (after DEBOUNCE_MS), at once for a step no chart holds yet, and at every
// tick of Play: it then updates the link and what only it can compute (the step's greedy sample).

const DEBOUNCE_MS = 250;
const PLAY_ICON = '<svg viewBox="0 0 24 24" aria-hidden="true"><path d="M8 5v14l11-7z"/></svg>';
const PAUSE_ICON = '<svg viewBox="0 0 24 24" aria-hidden="true"><path d="M6 5h4v14H6zM14 5h4v14h-4z"/></svg>';

function build(parent) {
  const root = document.createElement("div");
  root.className = "viz-scrub";
  root.dataset.testid = "vizScrubber";
  root.innerHTML = `
    <div class="label"><span class="name"></span></div>
    <div class="row">
      <button type="button" class="play"><span class="icon"></span><span class="word"></span></button>
      <div class="track">
        <input type="range" min="0" step="1">
        <div class="ends"><span class="first"></span><span class="last"></span></div>
      </div>
      <div class="readout" aria-live="polite"><span class="step"></span><span class="of"></span></div>
    </div>
    <div class="metrics"></div>`;
  parent.appendChild(root);
  return root;
}

function setText(el, text) {
  if (el.textContent !== text) el.textContent = text; // plain text: labels come from files
}

function render(root) {
  const {data, state} = root.__viz;
  const i = state.index;
  const input = root.querySelector("input");
  input.max = String(data.labels.length - 1);
  if (input.value !== String(i)) input.value = String(i);
  input.setAttribute("aria-label", data.label);
  input.setAttribute("aria-valuetext", `step ${data.labels[i]}`);
  input.title = data.help || "";
  setText(root.querySelector(".label .name"), data.label);
  root.querySelector(".label").title = data.help || "";
  setText(root.querySelector(".ends .first"), data.labels[0]);
  setText(root.querySelector(".ends .last"), data.labels[data.labels.length - 1]);
  setText(root.querySelector(".readout .step"), `Step ${data.labels[i]}`);
  setText(root.querySelector(".readout .of"), `snapshot ${i + 1} of ${data.labels.length}`);
  const play = root.querySelector(".play");
  const playing = Boolean(state.timer);
  play.hidden = !data.play_ms;
  play.title = playing ? "Pause: stay on this step" : data.play_help || "";
  play.setAttribute("aria-pressed", String(playing));
  root.querySelector(".play .icon").innerHTML = playing ? PAUSE_ICON : PLAY_ICON;
  setText(root.querySelector(".play .word"), playing ? "Pause" : "Play");
  const box = root.querySelector(".metrics");
  if (box.querySelectorAll(".metric").length !== data.metrics.length) {
    // in pairs, so that four numbers wrap as two rows of two, not three and one
    const pairs = [];
    data.metrics.forEach((_, k) => {
      if (k % 2 === 0) pairs.push(document.createElement("div"));
      const m = document.createElement("div");
      m.className = "metric";
      m.innerHTML = '<div class="m-label"></div><div class="m-value"></div><div class="m-delta"></div>';
      pairs[pairs.length - 1].className = "pair";
      pairs[pairs.length - 1].appendChild(m);
    });
    box.replaceChildren(...pairs);
  }
  const shown = box.querySelectorAll(".metric");
  data.metrics.forEach((m, k) => {
    const el = shown[k];
    setText(el.querySelector(".m-label"), m.label);
    setText(el.querySelector(".m-value"), m.values[i]);
    const delta = el.querySelector(".m-delta");
    setText(delta, m.deltas[i]);
    delta.dataset.tone = m.tones[i];
    delta.hidden = !m.deltas[i];
  });
  for (const [name, value] of Object.entries(data.palette)) root.style.setProperty(`--${name}`, value);
  root.style.colorScheme = data.scheme; // the slider's own track and thumb in the theme's colours
}

function publish(root) {
  // tell the live charts (and anything else listening on the channel) which step to show
  const {data, state} = root.__viz;
  window.__vizSteps = window.__vizSteps || {};
  window.__vizSteps[data.channel] = state.index;
  window.dispatchEvent(new CustomEvent("viz-step", {detail: {channel: data.channel, index: state.index}}));
}

function report(root) {
  // tell the server (a rerun of the fragment that holds the scrubber)
  const {state, send} = root.__viz;
  clearTimeout(state.debounce);
  state.debounce = null;
  state.resending = false;
  if (state.sent === state.index) return;
  state.sent = state.index;
  state.reported.add(state.index);
  send("step", state.index); // an event: the server hears it even when it equals an earlier report
}

function moveTo(root, index, how) {
  const {data, state} = root.__viz;
  state.index = Math.max(0, Math.min(data.labels.length - 1, index));
  render(root);
  publish(root);
  const [lo, hi] = data.window || [0, data.labels.length];
  if (how === "now" || data.immediate || state.index < lo || state.index >= hi) report(root);
  else {
    clearTimeout(state.debounce);
    state.debounce = setTimeout(() => report(root), DEBOUNCE_MS);
  }
}

function stop(root) {
  const {state} = root.__viz;
  clearInterval(state.timer);
  state.timer = null;
}

function togglePlay(root) {
  const {data, state} = root.__viz;
  if (state.timer) {
    stop(root);
    render(root);
    state.sent = null; // said again: a tick's report may have been merged away by a rerun in progress
    report(root);
    return;
  }
  if (state.index >= data.labels.length - 1) moveTo(root, 0, "now"); // from the start when the last step is shown
  state.timer = setInterval(() => {
    const last = root.__viz.data.labels.length - 1;
    if (state.index >= last) {
      stop(root);
      render(root);
      return;
    }
    moveTo(root, state.index + 1, "now");
    if (state.index >= last) {
      stop(root);
      render(root);
    }
  }, data.play_ms);
  render(root);
}

export default function (component) {
  const {data, parentElement, setTriggerValue} = component;
  let root = parentElement.querySelector(".viz-scrub");
  const first = !root;
  if (first) {
    root = build(parentElement);
    root.__viz = {state: {index: data.index, server: data.index, sent: data.index, reported: new Set(), steps: null}};
    root.querySelector("input").addEventListener("input", e => moveTo(root, Number(e.target.value)));
    // a drag let go (not a key, whose changes wait for the user to stop): no need to wait
    root.querySelector("input").addEventListener("pointerdown", () => { root.__viz.state.dragging = true; });
    root.querySelector("input").addEventListener("change", () => {
      if (root.__viz.state.dragging) report(root);
      root.__viz.state.dragging = false;
    });
    root.querySelector(".play").addEventListener("click", () => togglePlay(root));
  }
  const state = root.__viz.state;
  root.__viz.data = data;
  root.__viz.send = setTriggerValue;
  const steps = data.labels.join("\n");
  if (state.steps !== steps) { // another run (or the first): its own step
    if (state.steps !== null) stop(root);
    state.steps = steps;
    state.index = state.sent = data.index;
    state.reported.clear();
  } else if (data.index !== state.server && !state.reported.has(data.index)) {
    stop(root); // the server moved the step (a link, a new run): follow it
    clearTimeout(state.debounce);
    state.debounce = null;
    state.index = state.sent = data.index;
    state.reported.clear();
  } else if (data.index !== state.index && !state.timer && !state.debounce) {
    // the server has not heard of the step shown (a report merged away by a rerun in progress): say it again,
    // unless the rerun of the report in flight answers first
    state.debounce = setTimeout(() => {
      state.sent = null;
      report(root);
    }, DEBOUNCE_MS);
    state.resending = true;
  } else if (data.index === state.index && state.resending) {
    clearTimeout(state.debounce);
    state.debounce = null;
  }
  if (data.index === state.index) state.resending = false;
  state.server = data.index;
  render(root);
  publish(root);
  return () => {
    stop(root);
    clearTimeout(state.debounce);
    if (window.__vizSteps) delete window.__vizSteps[root.__viz.data.channel];
  };
}
