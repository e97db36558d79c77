"""Big-model inference on the CPU (viz_model/placement.py): forward time and the weights kept in memory of the shipped
model loaded whole, with half its blocks on disk, and with every block on disk (max_memory cpu=0).

    .venv/bin/python bench/offload.py [--rounds 5] [--tokens 64]

Prints one row per placement: blocks on disk, weights resident (placement.resident_bytes: the CPU's share plus the
largest disk block, loaded while it runs), median forward ms (one torch thread, interleaved, one warm-up round), and
the ratio to the whole model. Disk reads come
from the page cache after the first pass on a machine with free memory; a model truly larger than memory reads its
disk blocks from the drive on every pass.
"""

from __future__ import annotations

import argparse
import tempfile

import torch

from common import interleaved, save_results, show


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=64)
    args = p.parse_args()
    from viz_model import load_model
    from viz_model.placement import resident_bytes
    torch.set_grad_enabled(False)
    torch.set_num_threads(1)
    whole, _ = load_model()
    total = sum(t.numel() * t.element_size() for t in whole.parameters())
    folder = tempfile.mkdtemp(prefix="bench-offload-")
    models = {"whole": whole,
              "half the blocks on disk": load_model(max_memory={"cpu": total // 2}, offload_folder=folder)[0],
              "every block on disk": load_model(max_memory={"cpu": 0}, offload_folder=folder)[0]}
    ids = torch.randint(0, whole.cfg.d_vocab, (1, args.tokens), generator=torch.Generator().manual_seed(0))
    ms = interleaved({name: (lambda m=model: m(ids)) for name, model in models.items()}, rounds=args.rounds)
    base = ms["whole"]
    rows = []
    for name, model in models.items():
        device_map = getattr(model, "hf_device_map", {"": "cpu"})
        n_disk = sum(all(p.is_meta for p in b.parameters()) for b in model.blocks)
        resident = resident_bytes(model, device_map) if device_map != {"": "cpu"} else total
        rows.append({"placement": name, "blocks on disk": f"{n_disk}/{len(model.blocks)}",
                     "weights resident MB": resident / 2**20, "forward ms": ms[name], "× whole": ms[name] / base})
    show(f"The shipped model's forward pass at {args.tokens} tokens by placement (1 torch thread, median of "
         f"{args.rounds} interleaved rounds)", rows,
         "Half the budget sends more than half the blocks to disk: accelerate keeps room for the largest layer (the "
         "embedding). Disk reads come from the page cache here.")
    save_results()


if __name__ == "__main__":
    main()
