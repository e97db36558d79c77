"""The Streamlit app's building blocks (figures, tables, layout, caching); pages import from here.

Importing this package, before torch is loaded, sets two of torch's run-time settings for the app (each unless set
already):

- ``OMP_WAIT_POLICY=PASSIVE``: OpenMP lets idle worker threads sleep instead of spinning. The app shares its cores
  with the browser drawing the figures, and spinning threads made a 64-token run of the default model take
  100–150 ms instead of ~20 ms while the browser was busy (bench/latency.py).
- ``THP_MEM_ALLOC_ENABLE=1``: torch's CPU allocator asks for transparent huge pages (``madvise(MADV_HUGEPAGE)``) for
  blocks of 2 MB or more, where the kernel allows it (``/sys/kernel/mm/transparent_hugepage/enabled`` = ``always`` or
  ``madvise``). Every trace the app caches is new memory, and faulting it in 4 kB pages made a 64-token trace of a
  1.24 B model take 1.18 s instead of 0.74 s (bench/real_size.py); the weights' products also run faster on huge
  pages (forward 0.88 → 0.71 s). Resident memory after loading is unchanged (5,344 MB either way, measured); a kept
  float32 trace can take up to a third more (259 instead of 195 MB at 64 tokens), a float16 one did not.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
