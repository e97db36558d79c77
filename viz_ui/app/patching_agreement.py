"""The Cause and effect page's comparison of exact and attribution patching (Streamlit glue)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from viz_ui.analysis.interventions import attribution_available, normalised
from viz_ui.views.interventions import agreement_scatter
from viz_ui.app.layout import show_figure
from viz_ui.analysis.numeric import pearson


def show_agreement(state, maps: dict[str, np.ndarray], other: dict[str, np.ndarray] | None, clean_value: float,
                   corrupted_value: float, method: str) -> None:
    """Exact vs attribution patching on the same cells, once both are computed (``maps``: the shown method's
    normalised maps by site, ``other``: the other method's raw maps, or None): Pearson's r per map, and a scatter.
    Before that, a line that says how to get them."""
    if other is None:
        if attribution_available():
            st.caption("Choose the other method above and compute it too to see how well exact and attribution "
                       "patching agree on these cells (Pearson's r and a scatter).")
        return
    theirs = {site: normalised(values, clean_value, corrupted_value) for site, values in other.items()}
    exact, attr = (maps, theirs) if method == "exact" else (theirs, maps)
    rs = {site: pearson(exact[site], attr[site]) for site in exact}
    st.subheader("Exact vs attribution patching")
    st.markdown("Both methods on the same cells (normalised): Pearson's r per map, "
                + ", ".join(f"**{site}** {'n/a' if r is None else f'{r:.2f}'}" for site, r in rs.items())
                + ". Points far from the diagonal are cells where the first-order estimate misses the patched run.")
    show_figure(agreement_scatter(exact, attr, "Each cell: exact (x) vs attribution estimate (y)"), state,
                "patching_agreement",
                data=lambda: pd.concat([pd.DataFrame({"map": site, "exact": exact[site].ravel(),
                                                      "attribution": attr[site].ravel()}) for site in exact]))
