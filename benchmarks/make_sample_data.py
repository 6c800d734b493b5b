#!/usr/bin/env python3
"""Generate the small synthetic co-authorship graph shipped in ``sample_data/``.

Generative model (seeded, numpy ``default_rng(0)``; byte-identical on rerun):

* N = 3000 authors split into K = 7 communities of uneven size (the class label).
  About 1% of authors are inactive and end up isolated (no co-authored paper).
* Every active author gets a heavy-tailed activity weight (Pareto, shape 2.0),
  so a few authors write many papers and most write one or two.
* P = 5000 "papers" (hyperedges): each picks a home community, draws 2-6
  distinct authors by activity weight, each from the home community with
  probability 0.85 and from the whole population otherwise. Active authors that
  were never drawn get one extra 2-author paper with a home-community partner.
* The graph connects all co-authors of a paper pairwise (a clique per paper),
  so neighbourhoods overlap heavily. Edges are undirected, stored once as
  ``src < dst``, deduplicated, no self-loops.
* Features (d = 64): per-community mean vector plus isotropic Gaussian noise,
  tuned so a linear model on raw features is mediocre (~50-60% test accuracy) while
  averaging over neighbours (homophily) helps a lot.

Output follows the OGB node-property raw CSV layout (headerless gzip CSV):
``raw/{edge,num-node-list,num-edge-list,node-feat,node-label}.csv.gz`` and
``split/random/{train,valid,test}.csv.gz`` (20 per class train, 500 valid,
1000 test, the rest unlabeled). Gzip headers carry no name and mtime=0.

``hetero/`` holds the same graph typed (authors and papers, ogbn-mag raw layout; see
:func:`write_hetero`).

Usage: python benchmarks/make_sample_data.py [--out sample_data]
"""

import argparse
import gzip
import io
import os

import numpy as np

SEED = 0
N_NODES = 3000
N_CLASSES = 7
N_FEAT = 64
N_PAPERS = 5000
MIN_AUTHORS, MAX_AUTHORS = 2, 6
P_HOME = 0.85
ISOLATED_FRAC = 0.01
PARETO_SHAPE = 2.0
MEAN_SCALE = 1.0
NOISE_STD = 3.9
TRAIN_PER_CLASS, N_VALID, N_TEST = 20, 500, 1000


def _write_gz(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                           compresslevel=9) as gz:
            gz.write(text.encode("ascii"))


def _lines(rows):
    return "".join(r + "\n" for r in rows)


def _sample_authors(rng, k, home, labels, weights, class_members, class_w):
    """Draw k distinct authors; each from `home` community w.p. P_HOME."""
    chosen = set()
    n = len(labels)
    glob_p = weights / weights.sum()
    while len(chosen) < k:
        if rng.random() < P_HOME:
            members = class_members[home]
            a = int(members[rng.choice(len(members), p=class_w[home])])
        else:
            a = int(rng.choice(n, p=glob_p))
        chosen.add(a)
    return sorted(chosen)


def generate(seed=SEED):
    rng = np.random.default_rng(seed)
    n, k_cls = N_NODES, N_CLASSES

    # Uneven community sizes, then labels in a random node order.
    props = rng.dirichlet(np.full(k_cls, 6.0))
    sizes = np.floor(props * n).astype(int)
    sizes[: n - sizes.sum()] += 1
    labels = rng.permutation(np.repeat(np.arange(k_cls), sizes))

    # Activity: heavy-tailed; inactive authors get weight 0 (isolated).
    weights = rng.pareto(PARETO_SHAPE, n) + 1.0
    n_iso = int(round(ISOLATED_FRAC * n))
    inactive = rng.choice(n, n_iso, replace=False)
    weights[inactive] = 0.0

    class_members = [np.flatnonzero(labels == c) for c in range(k_cls)]
    class_w = [weights[m] / weights[m].sum() for m in class_members]
    class_mass = np.array([weights[m].sum() for m in class_members])
    class_mass /= class_mass.sum()

    papers = []
    for _ in range(N_PAPERS):
        home = int(rng.choice(k_cls, p=class_mass))
        k = int(rng.integers(MIN_AUTHORS, MAX_AUTHORS + 1))
        papers.append(_sample_authors(rng, k, home, labels, weights,
                                      class_members, class_w))

    # Make sure every active author has at least one co-authored paper.
    seen = np.zeros(n, dtype=bool)
    for p in papers:
        seen[p] = True
    for a in np.flatnonzero(~seen & (weights > 0)):
        members = class_members[labels[a]]
        while True:
            b = int(members[rng.choice(len(members), p=class_w[labels[a]])])
            if b != a:
                break
        papers.append(sorted((int(a), b)))

    # Cliques -> undirected edge set, stored once with src < dst.
    src, dst = [], []
    for p in papers:
        for i in range(len(p)):
            for j in range(i + 1, len(p)):
                src.append(p[i])
                dst.append(p[j])
    codes = np.unique(np.asarray(src, np.int64) * n + np.asarray(dst, np.int64))
    edges = np.stack([codes // n, codes % n], axis=1)

    # Class-correlated noisy features.
    means = rng.normal(0.0, MEAN_SCALE, (k_cls, N_FEAT))
    feats = means[labels] + rng.normal(0.0, NOISE_STD, (n, N_FEAT))
    feats = np.round(feats, 3)

    # Splits: 20 per class train, then valid/test from the rest.
    perm = rng.permutation(n)
    train = np.concatenate([perm[labels[perm] == c][:TRAIN_PER_CLASS]
                            for c in range(k_cls)])
    rest = perm[~np.isin(perm, train)]
    valid = rest[:N_VALID]
    test = rest[N_VALID:N_VALID + N_TEST]

    return dict(edges=edges, labels=labels, feats=feats,
                train=np.sort(train), valid=np.sort(valid), test=np.sort(test),
                n_papers=len(papers), papers=papers)


def write(out, data):
    n = len(data["labels"])
    raw = os.path.join(out, "raw")
    split = os.path.join(out, "split", "random")
    edges = data["edges"]
    _write_gz(os.path.join(raw, "edge.csv.gz"),
              _lines(f"{s},{d}" for s, d in edges))
    _write_gz(os.path.join(raw, "num-node-list.csv.gz"), f"{n}\n")
    _write_gz(os.path.join(raw, "num-edge-list.csv.gz"), f"{len(edges)}\n")
    _write_gz(os.path.join(raw, "node-feat.csv.gz"),
              _lines(",".join("%.3f" % v for v in row) for row in data["feats"]))
    _write_gz(os.path.join(raw, "node-label.csv.gz"),
              _lines(str(int(y)) for y in data["labels"]))
    for name in ("train", "valid", "test"):
        _write_gz(os.path.join(split, f"{name}.csv.gz"),
                  _lines(str(int(i)) for i in data[name]))

    deg = np.bincount(edges.ravel(), minlength=n)
    n_iso = int((deg == 0).sum())
    with open(os.path.join(out, "RELEASE_v1.txt"), "w") as f:
        f.write(f"gnnprep synthetic co-authorship sample (seed {SEED}): "
                f"{n} nodes, {len(edges)} undirected edges, "
                f"{N_CLASSES} classes, {N_FEAT} features.\n")
    buf = io.StringIO()
    buf.write("# gnnprep sample data\n\n")
    buf.write("Synthetic co-authorship graph in the OGB node-property raw CSV "
              "layout (headerless gzip CSV).\n")
    buf.write("Papers with 2-6 authors (85% from one community, heavy-tailed "
              "author activity) become cliques; labels are the communities; "
              "features are a per-class mean plus Gaussian noise.\n\n")
    buf.write("Regenerate (deterministic, byte-identical):\n\n")
    buf.write("    python benchmarks/make_sample_data.py --out sample_data\n\n")
    buf.write(f"- nodes: {n} ({n_iso} isolated)\n")
    buf.write(f"- undirected edges (stored once, src < dst): {len(edges)} "
              f"(from {data['n_papers']} papers)\n")
    buf.write(f"- classes: {N_CLASSES}, features: {N_FEAT} (3 decimals)\n")
    buf.write(f"- split/random: train {len(data['train'])} "
              f"({TRAIN_PER_CLASS}/class), valid {len(data['valid'])}, "
              f"test {len(data['test'])}, unlabeled "
              f"{n - len(data['train']) - len(data['valid']) - len(data['test'])}\n")
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(buf.getvalue())
    return n_iso


def write_hetero(out, data):
    """The same co-authorship sample as a typed graph in the ogbn-mag raw layout: node types
    ``author`` (features, labels, splits) and ``paper`` (no features), relation
    ``author___writes___paper`` (local ids), split ``split/random/author/``. Metapath
    ``author-paper-author`` recovers the co-authorship graph."""
    raw = os.path.join(out, "raw")
    n_auth, papers = len(data["labels"]), data["papers"]
    writes = [(a, p) for p, members in enumerate(papers) for a in members]
    _write_gz(os.path.join(raw, "num-node-dict.csv.gz"), f"author,paper\n{n_auth},{len(papers)}\n")
    _write_gz(os.path.join(raw, "triplet-type-list.csv.gz"), "author,writes,paper\n")
    rel = os.path.join(raw, "relations", "author___writes___paper")
    _write_gz(os.path.join(rel, "edge.csv.gz"), _lines(f"{a},{p}" for a, p in writes))
    _write_gz(os.path.join(rel, "num-edge-list.csv.gz"), f"{len(writes)}\n")
    _write_gz(os.path.join(rel, "edge_reltype.csv.gz"), _lines("0" for _ in writes))
    _write_gz(os.path.join(raw, "node-feat", "author", "node-feat.csv.gz"),
              _lines(",".join("%.3f" % v for v in row) for row in data["feats"]))
    _write_gz(os.path.join(raw, "node-label", "author", "node-label.csv.gz"),
              _lines(str(int(y)) for y in data["labels"]))
    for name in ("nodetype-has-feat", "nodetype-has-label"):
        _write_gz(os.path.join(raw, f"{name}.csv.gz"), "author,paper\nTrue,False\n")
    split = os.path.join(out, "split", "random")
    _write_gz(os.path.join(split, "nodetype-has-split.csv.gz"), "author,paper\nTrue,False\n")
    for name in ("train", "valid", "test"):
        _write_gz(os.path.join(split, "author", f"{name}.csv.gz"), _lines(str(int(i)) for i in data[name]))
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("# gnnprep heterogeneous sample\n\nThe co-authorship sample of `sample_data/` as a typed graph "
                "in the ogbn-mag raw layout: authors (features, labels, split/random/author) and the papers "
                f"they wrote ({n_auth} authors, {len(papers)} papers, {len(writes)} author-writes-paper "
                "edges). `gnnprep hdg sample_data/hetero --select metapath:APA=author-paper-author` recovers "
                "co-authorship.\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="sample_data",
                    help="output directory (default: sample_data)")
    args = ap.parse_args(argv)
    data = generate()
    n_iso = write(args.out, data)
    write_hetero(os.path.join(args.out, "hetero"), data)
    print(f"wrote {args.out}: {len(data['labels'])} nodes, "
          f"{len(data['edges'])} edges, {n_iso} isolated")


if __name__ == "__main__":
    main()
