"""The hop backend's interface, and the choice of backend for a run.

A backend computes rows of H_k = S H_{k-1} one edge block at a time (:mod:`gnnprep.precompute.hop_graph`
yields the blocks), where S = diag(l)(A + λI)diag(r) is the operator (:mod:`gnnprep.precompute.operators`).
The hop loop (:mod:`gnnprep.precompute.hop_loop`) drives every backend the same way::

    cur = be.prepare(x)                 # the column block, in the backend's memory and node order
    nxt = be.empty_like(cur)
    be.begin_hop(cur)                   # per-hop work before the blocks (a HAG's aggregation nodes)
    for r0, r1 in graph.blocks():
        be.hop_block(r0, r1, cur, nxt)  # nxt[r0:r1] = (S cur)[r0:r1]
        be.sync()
        write(be.to_host(nxt, rows))
    be.end_block()                      # after the block's last hop

Implementations: :class:`gnnprep.precompute.cpu_backends.NumbaBackend` and
:class:`~gnnprep.precompute.cpu_backends.HagBackend` (the CPU kernels),
:class:`gnnprep.precompute.torch_backends.TorchBackend` and
:class:`~gnnprep.precompute.torch_backends.TorchHagBackend` (torch, CPU or CUDA).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from gnnprep.precompute.hop_graph import HopGraph
from gnnprep.precompute.operators import Operator


@runtime_checkable
class HopBackend(Protocol):
    """What the hop loop asks of a backend. Arrays are numpy on the CPU kernels, torch tensors on
    torch; rows are in the computation's node order (:meth:`HopGraph.permute_rows`)."""

    name: str            # "numba", "hag" or "torch" (the writer treats torch's host copies as owned)
    op: Operator         # the operator, its scalings in the computation's node order
    # whether :meth:`hop_rows` / :meth:`hop_rows_in_place` can compute chosen rows only (the pruned
    # hops of ``--rows labeled``); backends without them compute every row
    selects_rows: bool

    def prepare(self, cur) -> Any:
        """``cur`` (a column block of X or of a hop, stored order, host memory) as this backend's
        input: in the computation's node order, on its device."""

    def empty_like(self, cur) -> Any:
        """An output buffer shaped like ``cur``."""

    def begin_hop(self, cur) -> None:
        """Work done once per hop before its edge blocks (a HAG's aggregation nodes; else nothing)."""

    def hop_block(self, r0: int, r1: int, cur, nxt) -> None:
        """nxt[r0:r1] = rows r0..r1-1 of S·cur."""

    def to_host(self, arr, rows) -> Any:
        """``arr[rows]`` (a slice, or an array of ids) readable on the host by the writer thread."""

    def sync(self) -> None:
        """Wait until the device's queued work is done (CUDA); nothing on the CPU."""

    def end_block(self) -> None:
        """A column block's hops are done: let go of its buffers (the next block's X is read next)."""


def make_backend(name: str, graph: HopGraph, op: Operator, device: str, hag=None) -> HopBackend:
    """The backend ``name`` (numba | torch) for operator ``op`` in the graph's node order; a HAG, when
    given, runs on that backend's executor (:class:`~gnnprep.precompute.cpu_backends.HagBackend`,
    or :class:`~gnnprep.precompute.torch_backends.TorchHagBackend` on torch)."""
    op = graph.operator(op)
    if name == "torch":
        from gnnprep.precompute.torch_backends import TorchBackend, TorchHagBackend  # torch only when asked for

        return TorchBackend(graph, op, device) if hag is None else TorchHagBackend(graph, op, hag, device)
    from gnnprep.precompute.cpu_backends import HagBackend, NumbaBackend

    return NumbaBackend(graph, op) if hag is None else HagBackend(graph, op, hag)
