// A page that Streamlit's frontend can no longer draw loads itself again (sent by viz_ui/app/preload.py; see recover.py).
// Streamlit 1.67's frontend throws "Bad delta path index N (should be between [0, M])" when a run's element arrives
// for a place the page has just cleared (a following student's screen under load, when a fragment run's new_session
// came before the frontend had taken the new page into its state; fragment_from_page_left.py now keeps that path
// from happening, and this stays as the safety net for any other); React then unmounts the whole app
// and the tab stays blank, its websocket closed. The address holds the view (and a class's code), so loading it
// again brings the same view back; at most once in 10 s, so that a page failing at once is never reloaded in a loop.
(() => {
    if (window.__vizRecover) return;
    window.__vizRecover = true;
    const KEY = "viz-recovered-at";
    const recover = error => {
        const message = String(error && error.message || "");
        if (!message.includes("Bad delta path index")) return;
        const last = Number(sessionStorage.getItem(KEY) || 0);
        if (10000 > Date.now() - last) return;
        sessionStorage.setItem(KEY, String(Date.now()));
        location.reload();
    };
    window.addEventListener("error", event => recover(event.error || event));
    window.addEventListener("unhandledrejection", event => recover(event.reason));
})();
