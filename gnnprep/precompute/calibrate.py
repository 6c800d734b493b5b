"""``gnnprep calibrate``: measure the planner's coefficients on small generated graphs.

The LC paper's optimiser uses memory/time coefficients "measured on small graphs" (its footnote);
this does the same for our cost model (:class:`gnnprep.precompute.profile.Profile`): kernel seconds per stored
nonzero at several column-block widths, the per-row term, HDF5 read/write and copy bandwidth, and the
per-block overhead. The profile is saved to ``$GNNPREP_CONFIG`` or ``~/.config/gnnprep`` and used by
later ``precompute --blocks auto`` runs on the same device.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from gnnprep.core.progress import Progress, no_progress
from gnnprep.precompute.features import read_scratch, write_scratch
from gnnprep.precompute.profile import Profile, profile_path


def generated_csr(n: int, avg_degree: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A symmetric power-law graph with communities and permuted ids (row-sorted CSR, no loops)."""
    rng = np.random.default_rng(seed)
    m = n * avg_degree // 2
    w = rng.pareto(1.5, n) + 1
    w /= w.sum()
    size = min(2000, n)
    src = rng.choice(n, m, p=w)
    inside = rng.random(m) < 0.85
    dst = np.where(inside, np.minimum((src // size) * size + rng.integers(0, size, m), n - 1), rng.choice(n, m, p=w))
    perm = rng.permutation(n)
    src, dst = perm[src], perm[dst]
    keys = np.unique(np.concatenate([dst * n + src, src * n + dst]))
    keys = keys[keys // n != keys % n]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(keys // n, minlength=n))]).astype(np.int64)
    return indptr, (keys % n).astype(np.int32)


def _best(fn, repeats: int = 2) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


KERNEL_ROUNDS = 3   # rounds over the widths, each in a rotated order; a width's figure is its best round


def _kernel_table(indptr, indices, scale, rng, widths, device: str, progress: Progress,
                  rounds: int = KERNEL_ROUNDS) -> tuple[dict, list]:
    """Kernel ns per stored nonzero at each column width, and on the CPU the per-row term in ns per
    output column (the kernel over empty rows). The CPU kernel is the hops' own
    (:func:`gnnprep.sparse.row_kernels.spmm_rows`, on huge-page buffers as a run's).

    The widths are measured in ``rounds`` rounds, each width once per round (after an untimed call)
    and in a rotated order, and each keeps its best round: on a shared VM the machine's speed drifts
    over a calibration's minute, and widths timed one after the other (best of two each, as before)
    took the drift into the table's shape — the table's ratios, not its level, choose the column
    blocks. Measured on the 2-core CI-class VM, 1M nodes: 64 against 32 columns 1.22x and 1.84x in two
    sequential calibrations minutes apart, 1.21-1.47x in four calibrations of rotated rounds."""
    from gnnprep.sparse import kernels, row_kernels

    block = None   # S on the device once for every width and round (CUDA)
    if device.startswith("cuda"):
        block = kernels.TorchBlock(indptr, indices, None, 0, len(indptr) - 1, scale, scale, 1.0, device)
    else:
        row_kernels.warm_up((indices.dtype,))
    table, row_cost = {}, {}
    for r in range(rounds):
        for i, w in enumerate(widths[r % len(widths):] + widths[:r % len(widths)]):
            progress("widths", r * len(widths) + i, rounds * len(widths))
            ns, rows_ns = _kernel_ns(indptr, indices, scale, rng, w, device, block)
            table[w] = min(table.get(w, float("inf")), round(ns, 3))
            if rows_ns is not None:
                row_cost[w] = min(row_cost.get(w, float("inf")), rows_ns)
    progress("widths", rounds * len(widths), rounds * len(widths))
    return {w: table[w] for w in widths}, [row_cost[w] for w in widths if w in row_cost]


def _kernel_ns(indptr, indices, scale, rng, w: int, device: str, block) -> tuple[float, float | None]:
    """(kernel ns per stored nonzero at width ``w``, one timed call after an untimed one; on the CPU
    the per-row term in ns per output column, else None). ``block``: S on the CUDA ``device``, or
    None for the CPU kernel (its kernels already compiled)."""
    from gnnprep.core.memory import empty_pages
    from gnnprep.sparse import row_kernels

    n, nnz = len(indptr) - 1, len(indices)
    x = rng.standard_normal((n, w), dtype=np.float32)
    if block is not None:
        import torch

        xt = torch.from_numpy(x).to(device)

        def run():
            block.matmul(xt)
            torch.cuda.synchronize()
        rows_ns = None
    else:
        x, values = empty_pages((n, w)), x
        x[:] = values
        out = empty_pages((n, w))

        def run():
            row_kernels.spmm_rows(indptr, indices, None, 0, scale, scale, 1.0, x, out)

        empty = np.zeros(n + 1, dtype=np.int64)
        rows_ns = _best(lambda: row_kernels.spmm_rows(empty, indices[:0], None, 0, scale, scale, 1.0, x, out),
                        repeats=1) / (n * w) * 1e9
    run()
    return _best(run, repeats=1) / nnz * 1e9, rows_ns


def _reorder_gain(indptr, indices, scale, rng) -> tuple[float, float]:
    """(kernel seconds after / before community reordering, capped at 1; reordering ns per entry)."""
    from gnnprep.core.memory import empty_pages
    from gnnprep.sparse import row_kernels
    from gnnprep.sparse.order import community_order, permute_csr

    n, nnz = len(indptr) - 1, len(indices)
    t0 = time.perf_counter()
    order = community_order(indptr, indices)
    p_indptr, p_indices, _ = permute_csr(indptr, indices, order)
    reorder_ns = (time.perf_counter() - t0) / (nnz + n) * 1e9
    x, xp, out = (empty_pages((n, 128)) for _ in range(3))
    x[:] = rng.standard_normal((n, 128), dtype=np.float32)
    xp[:] = x[order]
    plain = _best(lambda: row_kernels.spmm_rows(indptr, indices, None, 0, scale, scale, 1.0, x, out))
    ordered = _best(lambda: row_kernels.spmm_rows(p_indptr, p_indices, None, 0, scale, scale, 1.0, xp, out))
    return min(1.0, ordered / plain), reorder_ns


def _bandwidths(rng, device: str) -> tuple[int, float, float, float]:
    """(bytes moved, HDF5 read seconds, HDF5 write seconds, copy seconds) for a 64 MiB array; the
    copy is host to host on the CPU, pinned host to device on CUDA."""
    with tempfile.TemporaryDirectory() as tmp:
        a = rng.standard_normal((1 << 24,), dtype=np.float32)  # 64 MiB
        path = Path(tmp) / "bw.h5"

        t_write = _best(lambda: write_scratch(path, a))
        t_read = _best(lambda: read_scratch(path))
    if device.startswith("cuda"):
        import torch

        pinned = torch.from_numpy(a).pin_memory()

        def copy():
            pinned.to(device, non_blocking=True)
            torch.cuda.synchronize()
    else:
        b = np.empty_like(a)

        def copy():
            np.copyto(b, a)
    return a.nbytes, t_read, t_write, _best(copy, 3)


def _block_overhead(indptr, indices, scale, rng, device: str) -> float:
    """Seconds per extra block: the same rows as 64 blocks versus one (a fixed 0.5 ms on CUDA)."""
    from gnnprep.sparse import row_kernels

    n = len(indptr) - 1
    x = rng.standard_normal((n, 8), dtype=np.float32)
    if device.startswith("cuda"):
        return 0.0005
    out = np.empty_like(x)
    bounds = np.linspace(0, n, 65).astype(int)
    one = _best(lambda: row_kernels.spmm_rows(indptr, indices, None, 0, scale, scale, 1.0, x, out))
    many = _best(lambda: [row_kernels.spmm_rows(indptr[r0:r1 + 1], indices[indptr[r0]:indptr[r1]], None, r0,
                                                  scale, scale, 1.0, x, out[r0:r1])
                          for r0, r1 in zip(bounds[:-1], bounds[1:])])
    return max(0.0, (many - one) / 63)


def _hag_search_scale(indptr: np.ndarray, indices: np.ndarray) -> float:
    """The streamed HAG search on the calibration graph (in memory, capacity |V|/4: counting, the
    greedy, the assembly; no files), best of two, against its model's seconds for the same sizes
    less the start-up term (:func:`gnnprep.hag.stream.stream_plan`): this machine's
    ``hag_search_scale``. The kernels are compiled first on a small graph."""
    from gnnprep.hag.stream import SEARCH_SECONDS_FIXED, plan_for, search_arrays

    search_arrays(*generated_csr(2000, 20))
    cap = (len(indptr) - 1) // 4
    model = plan_for(indptr, cap, None, None).seconds - SEARCH_SECONDS_FIXED
    return _best(lambda: search_arrays(indptr, indices, capacity=cap)) / max(model, 1e-9)


def _save(prof: Profile) -> Path:
    """Write the profile atomically where :func:`gnnprep.precompute.profile.load_profile` finds it for its device."""
    target = profile_path(prof.device)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
    tmp.write_text(prof.to_json())
    os.replace(tmp, target)
    return target


def calibrate(device: str = "cpu", nodes: int = 200_000, degree: int = 20,
              widths: tuple[int, ...] = (8, 16, 32, 64, 128, 256), progress: Progress = no_progress,
              save: bool = True) -> tuple[Profile, Path | None]:
    """Measure the cost model's coefficients on a generated graph of ``nodes`` nodes (average degree
    ``degree``) on ``device`` (a resolved name: cpu, cuda or cuda:<i>); save the profile unless
    ``save`` is False. Returns the profile and where it was saved (None when not)."""
    indptr, indices = generated_csr(nodes, degree)
    n, nnz = nodes, len(indices)
    scale = np.full(n, 0.1, dtype=np.float32)
    rng = np.random.default_rng(1)
    cuda = device.startswith("cuda")
    table, row_cost = _kernel_table(indptr, indices, scale, rng, widths, device, progress)
    reorder_speedup, reorder_ns = Profile().reorder_speedup, Profile().reorder_ns_per_entry
    if not cuda:
        reorder_speedup, reorder_ns = _reorder_gain(indptr, indices, scale, rng)
    nbytes, t_read, t_write, t_copy = _bandwidths(rng, device)
    overhead = _block_overhead(indptr, indices, scale, rng, device)
    hag_scale = Profile().hag_search_scale if cuda else _hag_search_scale(indptr, indices)  # the search runs on the CPU
    prof = Profile(device="cuda" if cuda else "cpu", spmm_ns_per_nnz=table,
                   row_ns_per_col=round(float(np.median(row_cost)), 4) if row_cost else 0.01,
                   read_bytes_per_s=round(nbytes / t_read), write_bytes_per_s=round(nbytes / t_write),
                   copy_bytes_per_s=round(2 * nbytes / t_copy if not cuda else nbytes / t_copy),
                   block_overhead_s=round(overhead, 6), reorder_ns_per_entry=round(reorder_ns, 3),
                   reorder_speedup=round(reorder_speedup, 3), kernel_ref_rows=n, hag_search_scale=round(hag_scale, 3),
                   measured=f"gnnprep calibrate, {time.strftime('%Y-%m-%d')}, {n} nodes, {nnz} nonzeros, pid {os.getpid()}")
    return prof, (_save(prof) if save else None)


def as_dict(prof: Profile) -> dict:
    return dataclasses.asdict(prof)
