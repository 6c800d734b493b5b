"""The child program of ``bench_hag.py``: precompute without and with the HAG, alternating in one
process, ``REPS`` times each; prints {"plain": [...], "hag": [...]} (seconds, hop_seconds, measured
peak, the plan's column blocks per run) as one JSON line.

Plain and HAG runs alternate in one process, so both meet the same memory: on these VMs freed
memory goes back to the host (free page reporting) and a fresh page's first touch costs ~2.4 s/GiB
against ~0.25 s/GiB once backed, which falls hardest on the run that needs more memory (the HAG's
aggregation rows). The first pair shows the cold cost, the best of the rest the steady state.

    python benchmarks/child_hag.py GRAPH HAG PLAIN_OUT HAG_OUT HOPS BUDGET_BYTES REPS
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(graph: str, hag: str, outs: list[str], hops: int, budget: int, reps: int) -> dict:
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.run import precompute

    runs = {"plain": [], "hag": []}
    for _ in range(reps):
        for name, out, h in (("plain", outs[0], None), ("hag", outs[1], hag)):
            for p in (out, out + ".partial", out + ".partial.json"):
                if os.path.exists(p):
                    os.unlink(p)
            t0 = time.perf_counter()
            rep = precompute(graph, out, PrecomputeConfig(hops=hops, device="cpu", memory_budget=budget, hag=h))
            runs[name].append({"seconds": time.perf_counter() - t0, "hop_seconds": rep.hop_seconds,
                               "peak": rep.measured_peak_bytes or 0, "plan_c": rep.plan["c"]})
    return runs


if __name__ == "__main__":
    a = sys.argv[1:]
    print(json.dumps(main(a[0], a[1], a[2:4], int(a[4]), int(a[5]), int(a[6]))))
