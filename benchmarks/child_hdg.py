"""The child program of ``bench_hdg.py``: one HDG aggregation in its own process, timed, with its
peak memory above the loaded inputs (VmHWM after a reset); the output saved (the slots stacked in
name order); prints {"seconds", "peak_above_inputs", "entries"} as one JSON line.

    python benchmarks/child_hdg.py ours|scatter GRAPH HDG THREADS SAVE

ours:    ``gnnprep.hdg.aggregate`` (the hybrid bottom-up plan);
scatter: destination (shell) ids materialised from the offsets, messages x[ids] * w gathered into an
         [entries, d] tensor, ``torch.index_add_`` into the shells, divided by the weight sums,
         reshaped to the slots (torch with THREADS threads).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(which: str, graph: str, hdg_path: str, threads: int, save: str) -> dict:
    import numpy as np

    from gnnprep.core.memory import peak_rss, reset_peak, rss
    from gnnprep.graph.store import GraphStore
    from gnnprep.hdg import aggregate, read_hdg

    with GraphStore(graph) as g:
        x = g.features[:].astype(np.float32)
    h, _ = read_hdg(hdg_path)
    if which == "scatter":
        import torch
        torch.set_num_threads(threads)
        shell = h.roots[0]
        members = shell.child
        xt = torch.from_numpy(x)
        ids = torch.from_numpy(members.ids)
        w = torch.from_numpy(members.weights if members.weights is not None else np.ones(len(members.ids), np.float32))
        offsets = members.offsets
        torch.ones(4).index_add_(0, torch.zeros(2, dtype=torch.long), torch.ones(2))  # library warm-up
    base = rss()
    reset_peak()
    t0 = time.perf_counter()
    if which == "ours":
        out = aggregate(h, x, "mean")
    else:
        P = members.num_parents
        dst = torch.repeat_interleave(torch.arange(P), torch.from_numpy(np.diff(offsets)))   # destination per entry
        msg = xt.index_select(0, ids) * w[:, None]                                            # one message per entry
        agg = torch.zeros(P, x.shape[1]).index_add_(0, dst, msg)
        den = torch.zeros(P).index_add_(0, dst, w)
        agg /= torch.where(den == 0, torch.ones_like(den), den)[:, None]
        agg = agg.reshape(h.num_nodes, shell.fanout, x.shape[1])
        out = {name: agg[:, i].numpy() for i, name in enumerate(shell.slots)}
    seconds = time.perf_counter() - t0
    peak = peak_rss() - base
    np.save(save, np.stack([out[k] for k in sorted(out)]))
    return {"seconds": seconds, "peak_above_inputs": peak, "entries": int(h.roots[0].child.num_children)}


if __name__ == "__main__":
    a = sys.argv[1:]
    print(json.dumps(main(a[0], a[1], a[2], int(a[3]), a[4])))
