"""The user operators of benchmarks/bench_udf.py: weighted GCN, w_uv / sqrt(d̃_u d̃_v) over W + I (its
edge factor is the stored weight itself), and the same with sqrt(w_uv) (an edge factor of its own:
CSR values computed once). Loaded with ``gnnprep precompute --operator-file udf_ops.py:NAME``."""
import numpy as np


def weighted_gcn(src_deg, dst_deg, w):
    return w * src_deg ** -0.5 * dst_deg ** -0.5


weighted_gcn.loop = 1.0


def sqrt_weight_gcn(src_deg, dst_deg, w):
    return np.sqrt(w) * src_deg ** -0.5 * dst_deg ** -0.5


sqrt_weight_gcn.loop = 1.0
