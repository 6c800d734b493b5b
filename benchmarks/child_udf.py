"""The child programs of ``bench_udf.py``, each in its own process, printing one JSON line.

    python benchmarks/child_udf.py naive GRAPH OPS NAME K SAVE   # (c): the operator run as a torch UDF
    python benchmarks/child_udf.py imports                       # VmHWM after importing numpy, h5py, torch

Only the standard library is imported at the top: each program imports what it measures itself.
"""
import json
import sys
import time


def vmhwm() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def naive(graph: str, ops: str, name: str, K: int, save: str) -> dict:
    """The operator ``name`` of the file ``ops`` the way a message UDF runs (DGL / PyG): the
    coefficient of every entry from the Python function once (timed apart), then per hop gather
    (|E| x d messages), multiply, scatter-sum into the destinations, plus the self-loop term."""
    t_start = time.perf_counter()
    import importlib.util

    import h5py
    import numpy as np
    import torch

    rss_imports = vmhwm()
    spec = importlib.util.spec_from_file_location("ops", ops)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = getattr(mod, name)
    loop = float(getattr(fn, "loop", 0.0))

    t0 = time.perf_counter()
    with h5py.File(graph, "r") as f:
        indptr = f["adj/indptr"][:]
        indices = f["adj/indices"][:]
        w = f["adj/weights"][:]
        x = f["nodes/features"][:].astype(np.float32, copy=False)
    n = len(indptr) - 1
    # edge p of row v is u -> v (v = destination, u = indices[p] = source), as gnnprep's contract reads the store
    dst = torch.from_numpy(np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr)))
    src = torch.from_numpy(indices.astype(np.int64))
    del indices, indptr
    load = time.perf_counter() - t0

    t0 = time.perf_counter()
    w64 = w.astype(np.float64)
    deg_in = np.bincount(dst.numpy(), weights=w64, minlength=n) + loop      # d̃_v
    deg_out = np.bincount(src.numpy(), weights=w64, minlength=n) + loop     # d̃_u (equal on a symmetric store)
    coef = np.asarray(fn(deg_out[src.numpy()], deg_in[dst.numpy()], w64), dtype=np.float64)
    assert coef.shape == (len(w64),) and np.isfinite(coef).all()
    coef = torch.from_numpy(coef.astype(np.float32))
    loop_coef = None
    if loop:
        loop_coef = torch.from_numpy(np.asarray(fn(deg_out, deg_in, np.full(n, loop)), dtype=np.float32))
    del w64, w
    coef_s = time.perf_counter() - t0

    h = torch.from_numpy(x)
    del x
    hop_s = []
    t0 = time.perf_counter()
    for _ in range(K):
        t1 = time.perf_counter()
        msg = h.index_select(0, src)               # |E| x d: every message materialised
        msg.mul_(coef.unsqueeze(1))
        out = torch.zeros_like(h)
        out.index_add_(0, dst, msg)                # scatter-sum into the destinations
        del msg
        if loop_coef is not None:
            out.addcmul_(loop_coef.unsqueeze(1), h)  # the self-loop term
        h = out
        hop_s.append(time.perf_counter() - t1)
    hops = time.perf_counter() - t0
    np.save(save, h.numpy())
    return {"load_seconds": load, "coef_seconds": coef_s, "hops_seconds": hops, "hop_seconds": hop_s,
            "seconds": time.perf_counter() - t_start, "vmhwm": vmhwm(), "rss_imports": rss_imports,
            "threads": torch.get_num_threads(), "torch": torch.__version__}


def imports() -> dict:
    """What a process that only imported the naive variant's libraries holds (the memory ratio's floor)."""
    import h5py  # noqa: F401
    import numpy  # noqa: F401
    import torch  # noqa: F401

    return {"vmhwm": vmhwm()}


if __name__ == "__main__":
    what, a = sys.argv[1], sys.argv[2:]
    if what == "naive":
        print(json.dumps(naive(a[0], a[1], a[2], int(a[3]), a[4])))
    elif what == "imports":
        print(json.dumps(imports()))
    else:
        sys.exit(f"unknown program {what!r}")
