"""The child programs of ``bench_precompute.py`` (and the scipy peer of ``bench_uniform.py``), each
run in its own process; each prints one JSON line on stdout.

    python benchmarks/child_precompute.py scipy GRAPH K SAVE            # SAVE: .npy for hop K, or "-"
    python benchmarks/child_precompute.py torch GRAPH K SAVE [ordered|warm]  # ordered: S, X in community
                                                                       # order; warm: see torch_peer
    python benchmarks/child_precompute.py gnnprep GRAPH OUT K BUDGET REORDER   # BUDGET 0: the default;
                                                                       # REORDER "": the library's default
    python benchmarks/child_precompute.py baseline            # RSS with torch, numpy, h5py, gnnprep imported
    python benchmarks/child_precompute.py baseline-no-torch   # the same without torch

Only the standard library is imported at the top: each program imports what it measures itself.
"""
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_and_build_s(graph: str):
    """The graph store's CSR and X, and S as OGB's papers100M ``sgc.py`` builds it: adj.set_diag();
    deg = row sums; D^-1/2 adj D^-1/2; a float32 scipy CSR. (S, x, indptr, indices, n, load s, build s)."""
    import h5py
    import numpy as np
    import scipy.sparse as sp

    t_load = time.perf_counter()
    with h5py.File(graph, "r") as f:
        indptr = f["adj/indptr"][:]
        indices = f["adj/indices"][:]
        x = f["nodes/features"][:].astype(np.float32, copy=False)
    n = len(indptr) - 1
    t0 = time.perf_counter()
    load = t0 - t_load
    adj = sp.csr_matrix((np.ones(len(indices), np.float32), indices, indptr), shape=(n, n))
    adj = (adj + sp.identity(n, dtype=np.float32, format="csr")).tocsr()
    deg = np.asarray(adj.sum(axis=1), dtype=np.float32).ravel()
    dis = np.zeros_like(deg)
    dis[deg > 0] = deg[deg > 0] ** -0.5
    S = (sp.diags(dis) @ adj @ sp.diags(dis)).tocsr().astype(np.float32)
    del adj
    build = time.perf_counter() - t0
    return S, x, indptr, indices, n, load, build


def scipy_peer(graph: str, K: int, save: str) -> dict:
    """(i): x = S @ x K times, every hop kept in memory; only the K products timed."""
    import numpy as np

    S, x, indptr, indices, n, load, build = load_and_build_s(graph)   # all held, as sgc.py holds them
    hops = [x]
    hop_s = []
    t0 = time.perf_counter()
    for _ in range(K):
        t1 = time.perf_counter()
        x = S @ x
        hops.append(x)
        hop_s.append(time.perf_counter() - t1)
    products = time.perf_counter() - t0
    assert x.dtype == np.float32, x.dtype
    t_save = time.perf_counter()
    if save != "-":
        np.save(save, hops[-1])
    return {"load_seconds": load, "build_seconds": build, "products_seconds": products, "hop_seconds": hop_s,
            "save_seconds": time.perf_counter() - t_save, "nnz_S": int(S.nnz), "index_dtype": str(S.indices.dtype)}


def torch_peer(graph: str, K: int, save: str, ordered: bool = False, warm: bool = False) -> dict:
    """(ii): torch.sparse.mm with the whole S as a torch CSR tensor, K products timed; ``ordered``
    (ii'): S and X in gnnprep's community order first (the order found outside the timing).
    ``warm``: one untimed product, then K products of S and X each dropped before the next, so
    every timed call reuses memory already faulted in (a fresh output's page faults are not the
    library's speed: issue 34); nothing is saved."""
    import warnings

    import numpy as np

    S, x, indptr, indices, n, _, build = load_and_build_s(graph)
    import torch

    if ordered:
        sys.path.insert(0, ROOT)
        from gnnprep.sparse.order import community_order
        order = community_order(indptr, indices)
        S = S[order][:, order].tocsr()
        S.sort_indices()
        x = np.ascontiguousarray(x[order])
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        St = torch.sparse_csr_tensor(torch.from_numpy(S.indptr.astype(np.int64)),
                                     torch.from_numpy(S.indices.astype(np.int64)), torch.from_numpy(S.data),
                                     size=(n, n))
        del S
        small = torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([1, 0]), torch.ones(2), size=(2, 2))
        torch.sparse.mm(small, torch.ones(2, 4))  # library initialisation outside the timed loop
    build += time.perf_counter() - t0
    h = torch.from_numpy(x)
    hops = [h]
    hop_s = []
    if warm:
        torch.sparse.mm(St, h)  # untimed: its output is dropped at once
    t0 = time.perf_counter()
    for _ in range(K):
        t1 = time.perf_counter()
        y = torch.sparse.mm(St, h)
        hop_s.append(time.perf_counter() - t1)
        if warm:
            del y
        else:
            h = y
            hops.append(h)
    products = time.perf_counter() - t0
    if save != "-" and not warm:
        np.save(save, hops[-1].numpy())
    return {"build_seconds": build, "products_seconds": products, "hop_seconds": hop_s,
            "threads": torch.get_num_threads(), "torch": torch.__version__,
            "mkl": bool(torch.backends.mkl.is_available())}


def gnnprep_run(graph: str, out: str, K: int, budget: int, reorder: str) -> dict:
    """(iii): ``gnnprep.precompute.run.precompute`` through its library entry, the whole call timed;
    numba's kernels loaded from its cache before, an order kept beside the store deleted (the call
    finds its order itself)."""
    sys.path.insert(0, ROOT)
    from gnnprep.graph import order as kept_order
    from gnnprep.precompute.config import PrecomputeConfig
    from gnnprep.precompute.run import precompute
    from gnnprep.sparse import order as node_order

    extra = {"reorder": reorder} if reorder else {}
    # numba's JIT (loaded from its on-disk cache) outside the timed call, as torch's initialisation is
    _warm_up()
    node_order.warm_up()
    # an order kept beside the store by an earlier run would be loaded instead of found: time the finding
    for kind in ("community", "bfs"):
        kept_order.cache_path(graph, kind).unlink(missing_ok=True)
    t0 = time.perf_counter()
    rep = precompute(graph, out, PrecomputeConfig(hops=K, device="cpu", memory_budget=budget or None, **extra))
    wall = time.perf_counter() - t0
    return {"wall_seconds": wall, "report": rep.to_dict()}


def _warm_up() -> None:
    """The numba warm-up: the production kernels of the hops (not the test-only reference ones)."""
    import numpy as np

    from gnnprep.sparse import kernels, row_kernels

    kernels.warm_up()
    row_kernels.warm_up((np.int32, np.int64), (False, True), selected=True, hag=True)


def baseline() -> dict:
    """RSS of a process that has imported torch, numpy, h5py and gnnprep.precompute.run, and after
    the numba warm-up."""
    import psutil

    sys.path.insert(0, ROOT)
    import h5py  # noqa: F401
    import numpy  # noqa: F401
    import torch  # noqa: F401

    import gnnprep.precompute.run  # noqa: F401
    rss_imports = psutil.Process().memory_info().rss
    _warm_up()
    return {"rss_imports": rss_imports, "rss_after_warm_up": psutil.Process().memory_info().rss}


def baseline_no_torch() -> dict:
    """The same without importing torch (whether anything imported it anyway)."""
    import psutil

    sys.path.insert(0, ROOT)
    import h5py  # noqa: F401
    import numpy  # noqa: F401

    import gnnprep.precompute.run  # noqa: F401
    _warm_up()
    return {"rss": psutil.Process().memory_info().rss, "torch_loaded": "torch" in sys.modules}


def main(argv: list[str]) -> None:
    what, a = argv[0], argv[1:]
    if what == "scipy":
        out = scipy_peer(a[0], int(a[1]), a[2])
    elif what == "torch":
        out = torch_peer(a[0], int(a[1]), a[2], ordered=len(a) > 3 and a[3] == "ordered",
                         warm=len(a) > 3 and a[3] == "warm")
    elif what == "gnnprep":
        out = gnnprep_run(a[0], a[1], int(a[2]), int(a[3]), a[4] if len(a) > 4 else "")
    elif what == "baseline":
        out = baseline()
    elif what == "baseline-no-torch":
        out = baseline_no_torch()
    else:
        sys.exit(f"unknown program {what!r}")
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
