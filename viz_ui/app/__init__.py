"""The Streamlit glue: what needs a running Streamlit app.

- :mod:`.layout`: navigation, the page header, the sidebar, the dark and lecture themes (``*.css`` here), and
  :func:`.layout.show_figure`, the one way a figure reaches the page;
- :mod:`.state`: the loaded model and the text's trace (cached), the URL and session sync of shared selections;
- :mod:`.gate`: work above about a second waits for a button, with its estimate, a progress bar and a cache;
- :mod:`.live_chart` and :mod:`.scrubber`: custom components (``*.js``) that update a chart in place;
- one module per page that needs its own cached state: :mod:`.features`, :mod:`.interventions`, :mod:`.output`,
  :mod:`.steering`, :mod:`.timeline`, :mod:`.gated`; panels shared by pages (:mod:`.qk_panel`,
  :mod:`.patching_agreement`); :mod:`.dictionary_jobs` (background training of dictionaries); :mod:`.preload`.

Imports :mod:`viz_ui.views` and :mod:`viz_ui.analysis`, never the other way round.
"""
