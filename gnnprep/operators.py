"""Graph operators S as scalings of the stored adjacency: S = diag(l) (A + λI) diag(r).

Every operator used for precomputation factorises this way, so S·X never needs S's values:
``(S X)[v] = l[v] · (λ r[v] X[v] + Σ_{u ∈ N(v)} r[u] X[u])`` — one pass over the pattern of A with
the scaling fused (the "implicit normalisation" of the LC paper's block-wise scheme).

- ``sym``: S = D̃^-1/2 Ã D̃^-1/2 with Ã = A + I, d̃ = deg + 1 (GCN / SGC; Kipf & Welling 2017,
  Wu et al. 2019; the LC transformation of Maekawa et al. and OGB's papers100M SGC example).
- ``rw``: S = D̃^-1 Ã (random-walk / mean aggregation with self-loop).
- ``sym-noloop``: S = D^-1/2 A D^-1/2 (no self-loop; isolated nodes get zero rows), the LC paper's
  ``exact1hop``.

A is the stored adjacency: symmetric, binary, loop-free (see :mod:`gnnprep.store`). With edge weights
(``/adj/weights``) the degree becomes the weighted row sum; the kernel then reads the weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnnprep.errors import GnnprepError

OPERATORS = ("sym", "rw", "sym-noloop")


@dataclass(frozen=True)
class Operator:
    name: str
    left: np.ndarray    # l [n] float32
    right: np.ndarray   # r [n] float32
    loop: float         # λ

    def dense(self, adjacency) -> np.ndarray:
        """S as a dense float64 matrix (tests only)."""
        a = np.asarray(adjacency.todense() if hasattr(adjacency, "todense") else adjacency, dtype=np.float64)
        a = a + self.loop * np.eye(a.shape[0])
        return self.left.astype(np.float64)[:, None] * a * self.right.astype(np.float64)[None, :]


def parse_operators(text: str) -> tuple[str, ...]:
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    for s in names:
        if s not in OPERATORS:
            raise GnnprepError(f"--operator {s!r}: unknown; expected one or more of {', '.join(OPERATORS)}")
    if not names:
        raise GnnprepError(f"--operator: empty; expected one or more of {', '.join(OPERATORS)}")
    if len(set(names)) != len(names):
        raise GnnprepError(f"--operator {text!r}: an operator is named twice")
    return names


def _inv_pow(x: np.ndarray, p: float) -> np.ndarray:
    out = np.zeros_like(x, dtype=np.float64)
    nz = x > 0
    out[nz] = x[nz] ** (-p)
    return out


def make_operator(name: str, degree: np.ndarray, symmetric: bool) -> Operator:
    """Scalings of operator ``name`` from the (weighted) in-degree of the stored adjacency."""
    deg = degree.astype(np.float64)
    if name in ("sym", "sym-noloop") and not symmetric:
        raise GnnprepError(f"--operator {name}: needs a symmetric graph store; this one was ingested with "
                           "--directed (use --operator rw, or ingest without --directed)")
    if name == "sym":
        s = _inv_pow(deg + 1.0, 0.5).astype(np.float32)
        return Operator(name, s, s, 1.0)
    if name == "rw":
        return Operator(name, _inv_pow(deg + 1.0, 1.0).astype(np.float32), np.ones(len(deg), np.float32), 1.0)
    if name == "sym-noloop":
        s = _inv_pow(deg, 0.5).astype(np.float32)
        return Operator(name, s, s, 0.0)
    raise GnnprepError(f"--operator {name!r}: unknown; expected one of {', '.join(OPERATORS)}")
