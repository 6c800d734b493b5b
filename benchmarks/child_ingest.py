"""The child programs of ``bench_ingest.py``, each in its own process: the in-memory peers, which
read the whole input and build the symmetrised, deduplicated, loop-free CSR with scipy, and the hash
of a graph store's CSR to compare with. Each prints sha256(indptr as int64) + sha256(indices as
int64), hex.

    python benchmarks/child_ingest.py text EDGES_TSV NUM_NODES   # pandas read_csv + scipy
    python benchmarks/child_ingest.py npz FOLDER                 # papers100M layout: np.load + scipy
    python benchmarks/child_ingest.py hash-store GRAPH_STORE     # the store's /adj, in blocks
"""
import hashlib
import sys


def csr_hash(a) -> str:
    import numpy as np

    return (hashlib.sha256(a.indptr.astype(np.int64).tobytes()).hexdigest()
            + hashlib.sha256(a.indices.astype(np.int64).tobytes()).hexdigest())


def peer_text(path: str, n: int) -> str:
    import numpy as np
    import pandas as pd
    import scipy.sparse as sp

    df = pd.read_csv(path, sep="\t", header=None, dtype=np.int64, engine="c", comment="#")
    src, dst = df[0].to_numpy(), df[1].to_numpy()
    del df
    a = sp.coo_matrix((np.ones(len(src), np.float32), (dst, src)), shape=(n, n)).tocsr()
    del src, dst
    a = (a + a.T).tocsr()   # inline, not a helper: a caller's reference would hold one more CSR at the peak
    a.setdiag(0)
    a.eliminate_zeros()
    a.sort_indices()
    return csr_hash(a)


def peer_npz(folder: str) -> str:
    import numpy as np
    import scipy.sparse as sp

    z = np.load(folder + "/raw/data.npz")
    ei, x = z["edge_index"], z["node_feat"]
    y = np.load(folder + "/raw/node-label.npz")["node_label"]
    n = int(z["num_nodes_list"][0])
    a = sp.coo_matrix((np.ones(ei.shape[1], np.float32), (ei[1], ei[0])), shape=(n, n)).tocsr()
    del ei
    a = (a + a.T).tocsr()
    a.setdiag(0)
    a.eliminate_zeros()
    a.sort_indices()
    assert np.isfinite(x).all() and len(y) == n
    return csr_hash(a)


def hash_store(path: str) -> str:
    import h5py
    import numpy as np

    with h5py.File(path) as f:
        hp, hi = hashlib.sha256(), hashlib.sha256()
        ip, ix = f["adj/indptr"], f["adj/indices"]
        for s in range(0, len(ip), 1 << 24):
            hp.update(ip[s:s + (1 << 24)].astype(np.int64).tobytes())
        for s in range(0, len(ix), 1 << 24):
            hi.update(ix[s:s + (1 << 24)].astype(np.int64).tobytes())
    return hp.hexdigest() + hi.hexdigest()


if __name__ == "__main__":
    what, a = sys.argv[1], sys.argv[2:]
    if what == "text":
        print(peer_text(a[0], int(a[1])))
    elif what == "npz":
        print(peer_npz(a[0]))
    elif what == "hash-store":
        print(hash_store(a[0]))
    else:
        sys.exit(f"unknown program {what!r}")
