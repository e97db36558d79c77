// Loads Plotly's code (the plotly package's plotly.min.js, served by this app: viz_ui/app/preload.py) once per browser
// tab: a script element, and one promise (window.__vizPlotly) that every live chart awaits. The page's preload
// starts it as soon as the page's run begins, before the first chart arrives; a live chart starts it where the
// preload did not (viz_ui/app/live_chart.js). A failed load is forgotten, so that the next chart tries again.
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
