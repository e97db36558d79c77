"""The Streamlit app's building blocks (figures, tables, layout, caching); pages import from here.

Importing this package, before torch is loaded, asks OpenMP to let idle worker threads sleep instead of
spinning (``OMP_WAIT_POLICY=PASSIVE``, unless set already): the app shares its cores with the browser
drawing the figures, and spinning threads made a 64-token run of the default model take 100–150 ms instead
of ~20 ms while the browser was busy (bench/latency.py).
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
