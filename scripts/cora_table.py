"""Cora (public split): test accuracy of the six LC models, mean ± std over seeds.

    python scripts/cora_table.py [--data /work/shared/data/cora] [--work out/cora] [--seeds 5]

Ingests and precomputes Cora once (hops 0..10 of S = D̃^-1/2 Ã D̃^-1/2; SGC and LC-GCN read
hop K ≤ 10 of the same artifact), then for every model runs a small grid and keeps the setting with
the best mean *validation* accuracy over ``--grid-seeds`` seeds (the test split is never looked at
while choosing). The chosen setting is then trained with ``--seeds`` fresh seeds and its test
accuracy (at each run's best validation epoch) is reported as mean ± sample std.

Published (Kipf & Welling 2017; Wu et al. 2019): GCN 81.5, SGC 81.0.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnnprep.ingest import IngestConfig, ensure_graph_store  # noqa: E402
from gnnprep.precompute import precompute  # noqa: E402
from gnnprep.precomputeconfig import PrecomputeConfig  # noqa: E402
from gnnprep.train import TrainConfig, train  # noqa: E402

MAX_HOPS = 10
# settings shared by every model: Cora's bag-of-words rows scaled to unit L1 norm (as GCN/SGC do
# before propagation; here after, per hop), one batch holds all 140 training rows
COMMON = dict(normalize_features="row", batch_size=4096, epochs=1000, patience=100)
GRIDS = {
    "sgc": dict(hops=[2], lr=[0.2, 0.05], weight_decay=[5e-6, 5e-5, 5e-4], dropout=[0.0]),
    "lc-gcn": dict(hops=[2], lr=[0.01], weight_decay=[5e-4, 5e-3], dropout=[0.5, 0.8], hidden=[64]),
    "lc-jknet": dict(hops=[2, 4], lr=[0.01], weight_decay=[5e-4, 5e-3], dropout=[0.5], hidden=[64]),
    "lc-gprgnn": dict(hops=[10], lr=[0.01, 0.05], weight_decay=[5e-4], dropout=[0.5], hidden=[64], layers=[2],
                      alpha=[0.1, 0.2], dprate=[0.5]),
    "sign": dict(hops=[2, 4], lr=[0.01], weight_decay=[5e-4], dropout=[0.5], hidden=[64], layers=[1],
                 input_dropout=[0.5, 0.8]),
    "mlp": dict(lr=[0.01], weight_decay=[5e-4, 5e-3], dropout=[0.5, 0.8], hidden=[64]),
}


def grid(model: str):
    g = GRIDS[model]
    for values in itertools.product(*g.values()):
        yield dict(zip(g.keys(), values))


def evaluate(features: Path, model: str, params: dict, seed: int, runs: int) -> dict:
    config = TrainConfig(model=model, seed=seed, runs=runs, **COMMON, **params)
    with tempfile.TemporaryDirectory(prefix="cora-run-") as d:
        return train(features, Path(d) / "run", config).summary()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="/work/shared/data/cora", help="Cora in OGB layout (split/public).")
    ap.add_argument("--work", default="out/cora", help="Folder for the graph store and features.")
    ap.add_argument("--seeds", type=int, default=5, help="Seeds for the reported mean ± std.")
    ap.add_argument("--grid-seeds", type=int, default=2, help="Seeds per grid point (validation only).")
    ap.add_argument("--models", default="sgc,lc-gcn,lc-jknet,lc-gprgnn,sign,mlp")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default).")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    features = work / f"cora-hops{MAX_HOPS}.h5"
    if not features.exists():
        store = ensure_graph_store(args.data, IngestConfig(), cache_dir=str(work))
        precompute(store, features, PrecomputeConfig(hops=MAX_HOPS))

    rows = []
    for model in args.models.split(","):
        t0 = time.perf_counter()
        # the grid uses seeds far from the reported ones, so the final runs are fresh
        scored = [(evaluate(features, model, p, seed=1000, runs=args.grid_seeds)["valid_acc"], i, p)
                  for i, p in enumerate(grid(model))]
        best_valid, _, best = max(scored, key=lambda t: (t[0], -t[1]))
        s = evaluate(features, model, best, seed=0, runs=args.seeds)
        rows.append((model, s, best, len(scored), time.perf_counter() - t0))
        print(f"{model}: grid of {len(scored)}, chosen {best} (grid valid {best_valid:.4f}); "
              f"test {100 * s['test_acc']:.2f} ± {100 * s['test_acc_std']:.2f}", file=sys.stderr, flush=True)

    print(f"Cora, public split (140/500/1000), test accuracy at the best validation epoch, "
          f"mean ± std over {args.seeds} seeds; settings chosen on validation accuracy only")
    print(f"{'model':<10} {'test acc':>14} {'valid acc':>14} {'epochs':>7} {'s':>6}  chosen hyperparameters")
    for model, s, best, n, secs in rows:
        print(f"{model:<10} {100 * s['test_acc']:>7.2f} ± {100 * s['test_acc_std']:<4.2f} "
              f"{100 * s['valid_acc']:>7.2f} ± {100 * s['valid_acc_std']:<4.2f} {s['epochs_run'] / s['runs']:>7.0f} "
              f"{secs:>6.0f}  {', '.join(f'{k}={v}' for k, v in best.items())} (of {n})")
    print("common: " + ", ".join(f"{k}={v}" for k, v in COMMON.items()) + "; published: GCN 81.5, SGC 81.0")


if __name__ == "__main__":
    main()
