"""``python -m viz_ui.app.streamlit_patches``: whether every patch finds what it relies on in the installed Streamlit
(run it after changing Streamlit's version; docs/streamlit-patches.md). Exit status 0 when all do, else 1."""

import sys

import streamlit

from viz_ui.app import streamlit_patches


def main() -> int:
    """Print each problem (or that there is none); the exit status."""
    found = streamlit_patches.problems()
    for line in found:
        print(line)
    if not found:
        print(f"Streamlit {streamlit.__version__}: all {len(streamlit_patches.PATCHES)} patches in "
              f"{streamlit_patches.HOME} find what they replace or read.")
    return 1 if found else 0


if __name__ == "__main__":  # not when imported (viz_ui.app.preload imports every module of viz_ui once)
    sys.exit(main())
