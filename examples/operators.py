"""Example user operators for ``gnnprep precompute --operator-file examples/operators.py:NAME``.

Each function gets three float64 arrays of one length, for a batch of edges u -> v: ``src_deg``
(d̃_u, the edges out of u plus the function's ``loop``), ``dst_deg`` (d̃_v, the edges into v plus
``loop``) and ``w`` (the stored edge weight, 1 on an unweighted store, ``loop`` for the self-loop),
and returns one finite coefficient per edge. See docs/operators.md, "Your own operators".
"""

import numpy as np


def weighted_gcn(src_deg, dst_deg, w):
    """GCN's normalisation over A + I (Kipf & Welling 2017), with edge weights: a destination, a
    source and an edge factor; the planner hoists the first two into row and column scalings and
    reads the stored weights as they are (the same kernel as the built-in ``sym``)."""
    return w / np.sqrt(src_deg * dst_deg)


weighted_gcn.loop = 1.0


def degree_similarity(src_deg, dst_deg, w):
    """The mean over in-neighbours, each weighted by how alike its degree is to v's:
    exp(-|log d̃_u - log d̃_v|). Not a product of per-node factors, so the planner computes it once
    per stored entry (as CSR values)."""
    return w * np.exp(-np.abs(np.log(src_deg) - np.log(dst_deg)))


degree_similarity.reduce = "mean"


def max_pool(src_deg, dst_deg, w):
    """GraphSAGE-style max pooling (Hamilton et al. 2017) over the in-neighbours and v itself, each
    scaled by d̃_u^-1/2: the element-wise max, through the max-reduce kernel."""
    return w / np.sqrt(src_deg)


max_pool.reduce = "max"
max_pool.loop = 1.0
