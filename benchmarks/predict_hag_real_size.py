"""Prediction: ``gnnprep hag`` at ogbn-papers100M's real size, from a store of its shape at a fraction.

The search's plan needs only sizes (:func:`gnnprep.hag.stream.search_sizes`: nodes, stored entries, the
longest in-list, the window and its pair occurrences). This reads them from a store generated at
fraction F (``benchmarks/bench_scale.py --keep``), scales the counts by 1 / F (the pairs per entry and
the degree distribution's shape are what the generator keeps across fractions), and prints what
``gnnprep hag --dry-run`` would say at each budget (:func:`gnnprep.hag.builder.predict`): the blocks the
default search runs in, its predicted seconds and peak, the relabelled copy's seconds, the total, and
the search in the largest blocks the budget holds (``--block-entries`` that size). Seconds are the
2-core reference machine's (``--scale``: this machine's ``hag_search_scale`` from ``gnnprep calibrate``).

    .venv/bin/python benchmarks/predict_hag_real_size.py /tmp/sc10/run-.../graph.h5 --fraction 0.1
"""

from __future__ import annotations

import argparse
import json

from gnnprep.core.sizes import parse_size
from gnnprep.graph.store import GraphStore
from gnnprep.hag.builder import HagConfig, predict
from gnnprep.hag.stream import search_sizes

GiB = 1 << 30


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store")
    ap.add_argument("--fraction", type=float, required=True, help="the store's size against the real one")
    ap.add_argument("--budgets", default="2GiB,6GiB,12GiB,20GiB")
    ap.add_argument("--scale", type=float, default=1.0)
    args = ap.parse_args()
    with GraphStore(args.store) as g:
        n, m, longest, w, pairs = search_sizes(g.indptr(), None)
    f = 1.0 / args.fraction
    real = (round(n * f), round(m * f), round(longest * f), w, round(pairs * f))
    print(f"store: {n:,} nodes, {m:,} entries, longest {longest:,}, window {w}, {pairs / m:.2f} pairs an entry; "
          f"at 1/{args.fraction:g}: {real[0]:,} nodes, {real[1]:,} entries")
    rows = []
    for text in args.budgets.split(","):
        d = predict(real, False, HagConfig(memory_budget=parse_size(text)), args.scale)
        rows.append(d)
        wide = d["budget_blocks"]
        print(f"{text:>7}: {d['blocks']:4d} blocks of {d['block_entries'] / 1e6:6.1f}M: search {d['predicted_search_seconds']:7.0f} s"
              f" + copy {d['predicted_relabel_seconds']:5.0f} s ({'kept' if d['keeps_relabelled'] else 'not kept'})"
              f" = {d['predicted_seconds'] / 60:5.1f} min, peak {d['predicted_peak_bytes'] / GiB:5.2f} GiB;"
              f" the budget's blocks ({wide['block_entries'] / 1e6:.1f}M): search {wide['predicted_search_seconds']:.0f} s")
    print(json.dumps({"real_sizes": real, "plans": rows}))


if __name__ == "__main__":
    main()
