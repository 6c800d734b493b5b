"""Trainer benchmark: batched hops vs a per-hop loop, streaming vs in-memory epochs, recompute memory.

    python benchmarks/bench_train.py [--rows 200000] [--dim 128] [--hops 5] [--epochs 2] [--work out/bench-train]
    python benchmarks/bench_train.py --throughput [--train-rows 60000] [--hops 4] [--epochs 3] [--profile]

Writes a generated features artifact in the contract's layout (``/rows``, ``/hops/0..K`` chunked
in ~1 MiB row blocks, ``/labels``, ``/splits``; 60/20/20 split), then measures on the same data:

1. lc-gprgnn training-epoch time, gnnprep's model (the MLP runs once on the stacked hops
   [B, K+1, d]) against a straightforward PyTorch loop that calls an ``nn.Sequential`` MLP once per
   hop (``Σ_k γ_k · MLP(x[:, k])``), both on the same in-memory tensors, batches and optimiser.
   The loss curves are compared with dropout off (the two draw dropout masks in different orders,
   so with dropout on they are equally random, not equal).
2. Streaming from HDF5 (``memory_budget`` below the feature size) against in-memory epochs.
3. Activation memory of one training step (peak RSS in a fresh process) with and without
   ``recompute``, and the epoch time it costs.

``--throughput`` (issue 14) measures instead, on a large-regime artifact (60,000 training rows, valid
0.1× and test 0.18× that, as papers100M's splits; d = 128, K = 4, 172 classes) with the defaults
``gnnprep train lc-gprgnn`` fills in (hidden 256, 4 layers, batch 4096, dropout/dprate 0.5, eval every
epoch on valid and test in batches of 16,384): the epoch's training and evaluation seconds, the
compute bound (the same matmuls, forward and backward for every training row and forward for every
evaluated row, as bare ``torch.addmm``/``torch.mm`` on preallocated tensors with the same threads),
their ratio, peak RSS, and a straightforward implementation (``nn.Sequential`` MLP with
``nn.Dropout``, per-batch fancy indexing) in the same run. Rounds alternate the three, so a load
change on the machine hits all of them; the summary gives the best round and the median ratio.
``--profile`` adds where one epoch's time goes (torch.profiler, self time grouped by kind).

Every figure is a ratio against a peer measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness as H
from gnnprep.core.artifact import write_root_attrs
from gnnprep.train.trainer import TrainConfig, open_data, train_epoch


def make_features(path: Path, n: int, d: int, K: int, classes: int, seed: int = 0, splits: tuple | None = None,
                  command: str = "benchmarks/bench_train.py") -> None:
    """Hop k = hop k-1 mixed with a random row permutation of itself: cheap, and hops differ.
    ``splits``: (train, valid, test) row counts of a random permutation (default 60/20/20 % of n)."""
    if path.exists():
        return
    rng = np.random.default_rng(seed)
    chunk = max(1, (1 << 20) // (d * 4))
    centers = rng.standard_normal((classes, d)).astype(np.float32)
    y = rng.integers(0, classes, n)
    tmp = path.with_name(path.name + ".tmp")
    with h5py.File(tmp, "w") as f:
        f["rows"] = np.arange(n, dtype=np.int64)
        prev = None
        for k in range(K + 1):
            ds = f.create_dataset(f"channels/sym/{k}", (n, d), dtype=np.float32, chunks=(chunk, d))
            if k == 0:
                cur = centers[y] + 2.0 * rng.standard_normal((n, d)).astype(np.float32)
            else:
                cur = 0.5 * prev + 0.5 * prev[rng.permutation(n)]
            for s in range(0, n, 65536):
                ds[s:s + 65536] = cur[s:s + 65536]
            prev = cur
            f[f"hops/{k}"] = ds
        f["labels"] = y.astype(np.int64)
        perm = rng.permutation(n)
        tr, va, te = splits or (int(0.6 * n), int(0.8 * n) - int(0.6 * n), n - int(0.8 * n))
        for name, ids in (("train", perm[:tr]), ("valid", perm[tr:tr + va]), ("test", perm[tr + va:tr + va + te])):
            f[f"splits/{name}"] = np.sort(ids)
        write_root_attrs(f, "gnnprep.features", 1, {"command": command}, hops=K, operator="sym",
                         operators=json.dumps(["sym"]), graph_fingerprint="bench", num_classes=classes, rows="all")
    tmp.replace(path)


class LoopOverOurMLP(nn.Module):
    """The attribution peer: gnnprep's own MLP (fused ReLU-dropout), called once per hop."""

    def __init__(self, reference):
        super().__init__()
        self.ref = reference

    def forward(self, x):
        from gnnprep.train.models import dropout

        out = 0
        for k in range(x.shape[1]):
            h = dropout(self.ref.mlp(x[:, k]), self.ref.dprate, self.training)
            out = out + self.ref.gamma[k] * h
        return out


class LoopGPRGNN(nn.Module):
    """The straightforward version: one nn.Sequential MLP, called once per hop in a Python loop."""

    def __init__(self, reference):
        super().__init__()
        layers = []
        lin = reference.mlp.linears
        for i, l in enumerate(lin):
            layers.append(nn.Linear(l.in_features, l.out_features))
            if i < len(lin) - 1:
                layers += [nn.ReLU(), nn.Dropout(reference.mlp.dropout)]
        self.mlp = nn.Sequential(*layers)
        self.dprate = reference.dprate
        self.gamma = nn.Parameter(reference.gamma.detach().clone())
        with torch.no_grad():  # same initial weights as the batched model
            for l, ref in zip([m for m in self.mlp if isinstance(m, nn.Linear)], lin):
                l.weight.copy_(ref.weight)
                l.bias.copy_(ref.bias)

    def forward(self, x):
        out = 0
        for k in range(x.shape[1]):
            h = nn.functional.dropout(self.mlp(x[:, k]), self.dprate, self.training)
            out = out + self.gamma[k] * h
        return out


def epochs(model, data, n_epochs, seed):
    """Losses and seconds of ``n_epochs`` training epochs, with the settings ``open_data`` resolved
    (``data.config``: every default the config left open filled in)."""
    config = data.config
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    losses, times = [], []
    for _ in range(n_epochs):
        t = time.perf_counter()
        losses.append(train_epoch(model, opt, data, config, rng))
        times.append(time.perf_counter() - t)
    return losses, times


def fresh(data, seed):
    from gnnprep.train.models import build_model

    torch.manual_seed(seed)
    return build_model(data.spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--hops", type=int, default=5)
    ap.add_argument("--classes", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs per variant (after one warm-up epoch)")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--work", default="out/bench-train")
    ap.add_argument("--throughput", action="store_true",
                    help="large-regime epoch time against the compute bound of its matmuls (see above)")
    ap.add_argument("--train-rows", type=int, default=60_000, help="--throughput: training rows")
    ap.add_argument("--profile", action="store_true", help="--throughput: where one epoch's time goes")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.throughput:
        if args.hops == 5 and "--hops" not in sys.argv:
            args.hops = 4
        if args.classes == 16 and "--classes" not in sys.argv:
            args.classes = 172
        return throughput(args)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"features-{args.rows}x{args.dim}-K{args.hops}.h5"
    t = time.perf_counter()
    make_features(path, args.rows, args.dim, args.hops, args.classes)
    size = args.rows * args.dim * 4 * (args.hops + 1)
    print(f"features {path}: {args.rows:,} rows x {args.dim} x {args.hops + 1} hops, {size / 2**20:.0f} MiB "
          f"({time.perf_counter() - t:.1f} s to make); torch threads {torch.get_num_threads()}")

    config = TrainConfig(model="lc-gprgnn", lr=0.01)             # paper defaults: batch 4096, hidden 256, 4 layers
    data = open_data(path, config)
    print(f"in memory: {data.feature_bytes / 2**20:.0f} MiB held, {len(data.splits['train']):,} training rows")

    # 1. batched vs loop
    def timed(make, d, n):
        epochs(make(), d, 1, seed=1)                             # warm-up (allocator, threads)
        return epochs(make(), d, n, seed=2)

    config = data.config
    batched_t = timed(lambda: fresh(data, 0), data, args.epochs)[1]
    loop_t = timed(lambda: LoopGPRGNN(fresh(data, 0)), data, args.epochs)[1]
    ours_loop_t = timed(lambda: LoopOverOurMLP(fresh(data, 0)), data, args.epochs)[1]
    b, lp, ol = H.median(batched_t), H.median(loop_t), H.median(ours_loop_t)
    print(f"lc-gprgnn epoch (dropout {config.dropout}, dprate {config.dprate}): batched hops {b:.2f} s, "
          f"straightforward per-hop loop {lp:.2f} s -> {lp / b:.2f}x faster")
    print(f"  attribution: per-hop loop over gnnprep's MLP (fused ReLU-dropout, cheap masks) {ol:.2f} s: "
          f"the MLP accounts for {lp / ol:.2f}x, batching the hops for {ol / b:.2f}x")
    quiet = TrainConfig(model="lc-gprgnn", lr=0.01, dropout=0.0, dprate=0.0)
    dq = open_data(path, quiet)
    la = epochs(fresh(dq, 0), dq, 3, seed=3)[0]
    lb = epochs(LoopGPRGNN(fresh(dq, 0)), dq, 3, seed=3)[0]
    diff = max(abs(x - y) for x, y in zip(la, lb))
    print(f"same seed, dropout off, 3 epochs: loss batched {['%.6f' % v for v in la]}, loop {['%.6f' % v for v in lb]}; "
          f"max difference {diff:.2e}")
    del dq

    # 2. streaming vs in memory (same model, same seed)
    stream_cfg = TrainConfig(model="lc-gprgnn", lr=0.01, memory_budget=data.feature_bytes // 4)
    ds = open_data(path, stream_cfg)
    assert ds.loader.streaming
    stream_t = timed(lambda: fresh(ds, 0), ds, args.epochs)[1]
    s = H.median(stream_t)
    print(f"streaming epoch (budget {stream_cfg.memory_budget / 2**20:.0f} MiB < {data.feature_bytes / 2**20:.0f} MiB): "
          f"{s:.2f} s vs in-memory {b:.2f} s -> ratio {s / b:.2f}")
    # the reader alone: how long one epoch of reads takes with no model behind it
    t = time.perf_counter()
    for _ in ds.loader.batches(ds.splits["train"], 4096, True, np.random.default_rng(0)):
        pass
    print(f"streaming reads alone: {time.perf_counter() - t:.2f} s per epoch (hidden behind compute by the prefetch thread)")

    # 3. recompute: activation memory (peak RSS of one training step, in a fresh process) and time
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    peaks = {}
    for label, model_name, recompute, straightforward in (("straightforward loop", "lc-gprgnn", False, True),
                                                          ("gnnprep", "lc-gprgnn", False, False),
                                                          ("gnnprep --recompute", "lc-gprgnn", True, False)):
        q = ctx.Queue()
        p = ctx.Process(target=_peak_child, args=(model_name, recompute, straightforward, args.dim, args.hops,
                                                  args.classes, q))
        p.start()
        peaks[label] = q.get()
        p.join()
    print("activation memory of one training step (batch 4096, peak RSS above the model and batch): "
          + ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in peaks.items()))
    rc_cfg = TrainConfig(model="lc-gprgnn", lr=0.01, recompute=True)
    drc = open_data(path, rc_cfg)
    rc_t = timed(lambda: fresh(drc, 0), drc, 1)[1]
    r = H.median(rc_t)
    print(f"recompute: {peaks['gnnprep'] / max(peaks['gnnprep --recompute'], 1):.1f}x less activation memory, "
          f"epoch {r:.2f} s vs {b:.2f} s ({r / b:.2f}x time)")


# ---------------------------------------------------------------------------------------------------
# --throughput: epoch time against the compute bound of its matmuls (issue 14)


def make_large_features(path: Path, train_rows: int, d: int, K: int, classes: int, seed: int = 0) -> None:
    """A large-regime artifact: ``train_rows`` training rows, valid 0.1× and test 0.18× as many (the
    ratios of ogbn-papers100M's splits), plus 4% unlabeled rows; hops as in ``make_features``."""
    nv, nt = train_rows // 10, int(train_rows * 0.18)
    make_features(path, int((train_rows + nv + nt) * 1.04), d, K, classes, seed, splits=(train_rows, nv, nt),
                  command="benchmarks/bench_train.py --throughput")


def compute_bound(n_train: int, n_eval: list, batch: int, eval_batch: int, views: int, dims: list) -> tuple:
    """(train, eval) seconds of one epoch's matmuls alone: for every training batch the MLP's forward
    (``addmm`` with bias, as nn.Linear) and backward (weight gradient ``gᵀ·a`` for every layer, input
    gradient ``g·W`` for every layer but the first), for every evaluation batch the forward; on
    preallocated tensors [rows · views, width], in torch's current threads."""
    Ws = [torch.randn(o, i) * 0.05 for i, o in zip(dims[:-1], dims[1:])]
    bs = [torch.zeros(o) for o in dims[1:]]

    def buffers(m):
        return [torch.randn(m, dims[0])] + [torch.randn(m, o) for o in dims[1:]]

    acts = buffers(batch * views)
    grads = [torch.randn(batch * views, o) for o in dims[1:]]
    gin = [torch.empty(batch * views, i) for i in dims[:-1]]
    gW = [torch.empty(o, i) for i, o in zip(dims[:-1], dims[1:])]

    def step(acts, m, backward):
        for i, W in enumerate(Ws):
            torch.addmm(bs[i], acts[i][:m], W.t(), out=acts[i + 1][:m])
        if backward:
            for i in reversed(range(len(Ws))):
                torch.mm(grads[i][:m].t(), acts[i][:m], out=gW[i])
                if i > 0:
                    torch.mm(grads[i][:m], Ws[i], out=gin[i][:m])

    def sizes(n, b):
        return [min(b, n - s) for s in range(0, n, b)]

    step(acts, batch * views, True)                               # warm-up
    t = time.perf_counter()
    for m in sizes(n_train, batch):
        step(acts, m * views, True)
    train_s = time.perf_counter() - t
    acts = buffers(eval_batch * views)
    step(acts, eval_batch * views, False)
    t = time.perf_counter()
    for n in n_eval:
        for m in sizes(n, eval_batch):
            step(acts, m * views, False)
    return train_s, time.perf_counter() - t


class PlainGPRGNN(nn.Module):
    """The straightforward lc-gprgnn: nn.Sequential(Linear, ReLU, Dropout, …) on the stacked hops,
    F.dropout on its output, the γ-weighted sum by einsum."""

    def __init__(self, spec):
        super().__init__()
        dims = [spec.in_dim] + [spec.hidden] * (spec.num_layers - 1) + [spec.num_classes]
        layers = []
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(dims) - 2:
                layers += [nn.ReLU(), nn.Dropout(spec.dropout)]
        self.mlp = nn.Sequential(*layers)
        self.dprate = spec.dprate
        from gnnprep.train.models import gpr_init
        self.gamma = nn.Parameter(gpr_init(spec.alpha, spec.hops))

    def forward(self, x):
        h = nn.functional.dropout(self.mlp(x), self.dprate, self.training)
        return torch.einsum("bkc,k->bc", h, self.gamma)


def plain_epoch(model, opt, data, config, rng) -> tuple[float, float]:
    """(train, eval) seconds of the straightforward loop: per-batch fancy indexing of the held rows."""
    X, Y = data.loader.data, data.loader.labels
    t = time.perf_counter()
    model.train()
    tr = data.splits["train"]
    idx = torch.from_numpy(tr[rng.permutation(len(tr))])
    for s in range(0, len(idx), config.batch_size):
        b = idx[s:s + config.batch_size]
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(X[b].float()), Y[b])
        loss.backward()
        opt.step()
    t1 = time.perf_counter()
    model.eval()
    with torch.no_grad():
        for name in ("valid", "test"):
            sp = torch.from_numpy(data.splits[name])
            for s in range(0, len(sp), config.eval_batch_size):
                b = sp[s:s + config.eval_batch_size]
                logits = model(X[b].float())
                float(nn.functional.cross_entropy(logits, Y[b], reduction="sum"))
                logits.argmax(1).numpy()
    return t1 - t, time.perf_counter() - t1


KINDS = (("matmul (mm, addmm, bmm)", ("aten::mm", "aten::addmm", "aten::bmm", "aten::addmv_", "aten::mv")),
         ("dropout random bits", ("aten::random_", "aten::bitwise_xor_", "aten::bernoulli_", "aten::uniform_")),
         ("relu/dropout elementwise", ("_ReLUDropout", "_ReLUDropoutBackward", "_Dropout", "_DropoutBackward",
                                       "aten::clamp_min", "aten::clamp_min_", "aten::relu", "aten::relu_",
                                       "aten::threshold_backward", "aten::ge", "aten::lt", "aten::mul", "aten::mul_",
                                       "aten::native_dropout", "aten::native_dropout_backward", "aten::masked_fill_")),
         ("copies (bias broadcast, reshape, casts)", ("aten::copy_", "aten::clone", "aten::_to_copy")),
         ("bias grad, loss, softmax", ("aten::sum", "aten::_log_softmax", "aten::_log_softmax_backward_data",
                                      "aten::nll_loss_forward", "aten::nll_loss_backward", "aten::argmax")),
         ("data gather", ("aten::index_select", "aten::index")),
         ("optimizer (Adam)", ("aten::_foreach_", "aten::lerp_", "aten::addcmul_", "aten::addcdiv_", "aten::sqrt",
                               "aten::add_", "aten::div", "aten::div_", "aten::_fused_adam_")))


def profile_breakdown(fn) -> dict:
    """Self CPU seconds of ``fn()`` by kind of op (torch.profiler), plus wall seconds."""
    from torch.profiler import ProfilerActivity, profile

    t = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    wall = time.perf_counter() - t
    out = {k: 0.0 for k, _ in KINDS}
    out["other ops"] = 0.0
    for e in prof.key_averages():
        kind = next((k for k, names in KINDS if e.key in names or any(e.key.startswith(n) for n in names
                                                                        if n.endswith("_"))), "other ops")
        out[kind] += e.self_cpu_time_total / 1e6
    out["python / dispatch (wall - ops)"] = max(0.0, wall - sum(out.values()))
    out["wall"] = wall
    return out


def throughput(args) -> None:
    import resource

    from gnnprep.train.models import build_model
    from gnnprep.train.trainer import evaluate, plain_accuracy

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"large-{args.train_rows}x{args.dim}-K{args.hops}-c{args.classes}.h5"
    make_large_features(path, args.train_rows, args.dim, args.hops, args.classes)
    config = TrainConfig(model="lc-gprgnn")                       # every setting from the large regime
    data = open_data(path, config)
    config, spec = data.config, data.spec
    assert not data.loader.streaming
    sizes = {k: len(v) for k, v in data.splits.items()}
    print(f"features {path}: regime {data.regime}, splits {sizes}, d {spec.in_dim}, K {spec.hops}, "
          f"{spec.num_classes} classes; torch threads {torch.get_num_threads()}")
    print(f"defaults filled in: {data.defaults}; model {spec.name} hidden {spec.hidden} layers {spec.num_layers} "
          f"dropout {spec.dropout} dprate {spec.dprate}, eval batch {config.eval_batch_size}")
    dims = [spec.in_dim] + [spec.hidden] * (spec.num_layers - 1) + [spec.num_classes]
    V = spec.hops + 1
    n_eval = [sizes[k] for k in ("valid", "test") if k in sizes]
    accuracy = plain_accuracy

    torch.manual_seed(0)
    ours = build_model(spec)
    ours_opt = torch.optim.Adam(ours.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    torch.manual_seed(0)
    plain = PlainGPRGNN(spec)
    plain_opt = torch.optim.Adam(plain.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    rng_a, rng_b = np.random.default_rng(0), np.random.default_rng(0)

    def ours_epoch():
        t = time.perf_counter()
        train_epoch(ours, ours_opt, data, config, rng_a)
        t1 = time.perf_counter()
        evaluate(ours, data, config, accuracy)
        return t1 - t, time.perf_counter() - t1

    ours_epoch()                                                  # warm-up: numba kernels, allocator
    plain_epoch(plain, plain_opt, data, config, rng_b)
    rows = []
    for r in range(args.epochs):
        a = ours_epoch()
        b = plain_epoch(plain, plain_opt, data, config, rng_b)
        c = compute_bound(sizes["train"], n_eval, config.batch_size, config.eval_batch_size, V, dims)
        rows.append((a, b, c))
        print(f"round {r + 1}: gnnprep epoch {sum(a):.2f} s (train {a[0]:.2f} + eval {a[1]:.2f}), "
              f"compute bound {sum(c):.2f} s (train {c[0]:.2f} + eval {c[1]:.2f}) -> ratio {sum(a) / sum(c):.2f}; "
              f"straightforward {sum(b):.2f} s (train {b[0]:.2f} + eval {b[1]:.2f}) -> {sum(b) / sum(a):.2f}x gnnprep",
              flush=True)
    ratio = [sum(a) / sum(c) for a, _, c in rows]
    plain_ratio = [sum(b) / sum(a) for a, b, _ in rows]
    best = min(range(len(rows)), key=lambda i: sum(rows[i][0]))
    a, b, c = rows[best]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"summary: gnnprep epoch {sum(a):.2f} s (train {a[0]:.2f}, eval {a[1]:.2f}) in its best round, "
          f"compute bound {sum(c):.2f} s; epoch / compute bound: median {H.median(ratio):.2f} "
          f"(range {H.span(ratio)}); straightforward / gnnprep: median {H.median(plain_ratio):.2f} "
          f"(range {H.span(plain_ratio)}); peak RSS {peak / 2**20:.0f} MiB "
          f"(features held {data.feature_bytes / 2**20:.0f} MiB)")
    if args.profile:
        for label, fn in (("gnnprep", ours_epoch), ("straightforward", lambda: plain_epoch(plain, plain_opt, data,
                                                                                              config, rng_b))):
            p = profile_breakdown(fn)
            wall = p.pop("wall")
            print(f"profile, {label} epoch (train + eval, {wall:.2f} s wall under the profiler): " +
                  ", ".join(f"{k} {v:.2f} s" for k, v in sorted(p.items(), key=lambda kv: -kv[1])))


def _peak_child(model_name, recompute, straightforward, d, K, classes, q):
    """Peak resident memory of one forward + backward above what the model and batch hold, sampled
    every millisecond after a warm-up step. Freed tensors go back to the OS at once (mmap threshold
    pinned low), so RSS follows live tensors."""
    import ctypes
    import threading

    import psutil

    from gnnprep.train.models import ModelSpec, build_model

    ctypes.CDLL("libc.so.6").mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD: fixed, not adaptive
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model(ModelSpec(name=model_name, in_dim=d, num_classes=classes, hops=K, recompute=recompute))
    if straightforward:
        model = LoopGPRGNN(model)
    x = torch.randn(4096, K + 1, d)
    y = torch.randint(0, classes, (4096,))
    model.train()
    nn.functional.cross_entropy(model(x), y).backward()       # warm-up: one-time buffers, parameter grads
    proc = psutil.Process()
    base = proc.memory_info().rss
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.001)

    t = threading.Thread(target=sample)
    t.start()
    nn.functional.cross_entropy(model(x), y).backward()
    done.set()
    t.join()
    q.put(peak[0] - base)

if __name__ == "__main__":
    main()
