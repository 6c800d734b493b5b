"""The peer of ``bench_scale.py``: the scipy recipe of OGB's papers100M ``sgc.py`` on the generated
OGB binary layout, in its own process: np.load data.npz whole, build A, symmetrise, A + I,
D^-1/2 (A + I) D^-1/2, K float32 sparse-dense products; the split rows of hop K saved to OUT (and
their ids to OUT with -rows.npy); prints {"load_seconds", "build_seconds", "hop_seconds", "nnz"}.

    python benchmarks/child_scale.py FOLDER K OUT
"""
import gzip
import json
import sys
import time


def main(folder: str, K: int, out: str) -> dict:
    import numpy as np
    import scipy.sparse as sp

    t0 = time.perf_counter()
    z = np.load(folder + "/raw/data.npz")
    ei, x, n = z["edge_index"], z["node_feat"], int(z["num_nodes_list"][0])

    def ids(s):
        with gzip.open(f"{folder}/split/time/{s}.csv.gz", "rt") as f:
            return np.array(f.read().split(), dtype=np.int64)
    rows = np.unique(np.concatenate([ids(s) for s in ("train", "valid", "test")]))
    t1 = time.perf_counter()
    keep = ei[0] != ei[1]                                  # to_undirected + set_diag: loops replaced by I
    a = sp.coo_matrix((np.ones(int(keep.sum()), np.float32), (ei[1][keep], ei[0][keep])), shape=(n, n)).tocsr()
    del ei, keep
    a = (a + a.T).tocsr()
    a.data[:] = 1                                          # symmetrise, duplicates count once
    a = (a + sp.identity(n, np.float32, format="csr")).tocsr()
    dinv = np.asarray(a.sum(axis=1), dtype=np.float32).ravel() ** -0.5
    s = (sp.diags(dinv) @ a @ sp.diags(dinv)).astype(np.float32).tocsr()
    del a
    t2 = time.perf_counter()
    hops = []
    for _ in range(K):
        h = time.perf_counter()
        x = s @ x
        hops.append(time.perf_counter() - h)
    np.save(out, x[rows])
    np.save(out.replace(".npy", "-rows.npy"), rows)
    return {"load_seconds": t1 - t0, "build_seconds": t2 - t1, "hop_seconds": hops, "nnz": int(s.nnz)}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), sys.argv[3])))
