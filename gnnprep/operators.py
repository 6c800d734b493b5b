"""Graph operators S as scalings of the stored adjacency: S = diag(l) (A + λI) diag(r).

Every operator used for precomputation factorises this way, so S·X never needs S's values:
``(S X)[v] = l[v] · (λ r[v] X[v] + Σ_{u ∈ N(v)} r[u] X[u])`` — one pass over the pattern of A with
the scaling fused (the "implicit normalisation" of the LC paper's block-wise scheme).

- ``sym``: S = D̃^-1/2 Ã D̃^-1/2 with Ã = A + I, d̃ = deg + 1 (GCN / SGC; Kipf & Welling 2017,
  Wu et al. 2019; the LC transformation of Maekawa et al. and OGB's papers100M SGC example).
- ``rw``: S = D̃^-1 Ã (random-walk / mean aggregation with self-loop).
- ``sym-noloop``: S = D^-1/2 A D^-1/2 (no self-loop; isolated nodes get zero rows), the LC paper's
  ``exact1hop``.

- ``norm:a=A,b=B,loop=L``: S = D̃^-a (A + L·I) D̃^-b with d̃ = deg + L, the degree-exponent family
  (a = b = 1/2, L = 1 is ``sym``; a = 1, b = 0, L = 1 is ``rw``; a = 0, b = 1 propagates
  "column-normalised", as in Graphiler's and DGL's ``norm`` variants). Only scalings of the rows and
  columns, so it runs in the same fused kernels as the built-ins: no per-edge message. Given with
  any subset of a, b, loop (defaults 0.5, 0.5, 1); its canonical name (all three, in that order) is
  the channel name.

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


NORM = "norm"
NORM_KEYS = {"a": 0.5, "b": 0.5, "loop": 1.0}
_EXPECTED = f"one or more of {', '.join(OPERATORS)}, {NORM}:a=A,b=B,loop=L"


def _norm_name(spec: str) -> str:
    """The canonical name of a ``norm:`` spec (every key, in order, shortest float text), or a
    GnnprepError naming what is wrong."""
    values = dict(NORM_KEYS)
    body = spec[len(NORM) + 1:]
    for item in filter(None, (t.strip() for t in body.split(","))):
        key, eq, text = item.partition("=")
        if not eq or key.strip() not in NORM_KEYS:
            raise GnnprepError(f"--operator {spec!r}: {item!r}: expected a=, b= or loop= with a number")
        try:
            v = float(text)
        except ValueError:
            raise GnnprepError(f"--operator {spec!r}: {item!r}: expected a number after {key.strip()}=") from None
        if not np.isfinite(v) or abs(v) > 16:
            raise GnnprepError(f"--operator {spec!r}: {item!r}: expected a finite number in -16..16")
        if key.strip() == "loop" and v < 0:
            raise GnnprepError(f"--operator {spec!r}: loop={text}: expected >= 0")
        values[key.strip()] = v
    return f"{NORM}:" + ",".join(f"{k}={values[k]:g}" for k in NORM_KEYS)


def split_operators(text: str) -> list[str]:
    """Comma-separated names (operators or channels), where a ``norm:`` spec's own ``key=value``
    items, which contain commas too, stay with it; ``norm:`` specs come back canonical."""
    names: list[str] = []
    for token in (t.strip() for t in text.split(",")):
        if not token:
            continue
        if "=" in token and ":" not in token and names and names[-1].startswith(NORM + ":"):
            names[-1] += "," + token          # a further key of the norm spec before it
        else:
            names.append(token)
    return [_norm_name(s) if s.startswith(NORM + ":") else s for s in names]


def parse_operators(text: str) -> tuple[str, ...]:
    """Operator names from ``--operator`` (:func:`split_operators`), each a known operator."""
    names = split_operators(text)
    for s in names:
        if not s.startswith(NORM + ":") and s not in OPERATORS:
            raise GnnprepError(f"--operator {s!r}: unknown; expected {_EXPECTED}")
    if not names:
        raise GnnprepError(f"--operator: empty; expected {_EXPECTED}")
    if len(set(names)) != len(names):
        raise GnnprepError(f"--operator {text!r}: an operator is named twice")
    return tuple(names)


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
    if name.startswith(NORM + ":"):
        p = {k: float(v) for k, v in (item.split("=") for item in _norm_name(name)[len(NORM) + 1:].split(","))}
        d = deg + p["loop"]
        return Operator(_norm_name(name), _inv_pow(d, p["a"]).astype(np.float32),
                        _inv_pow(d, p["b"]).astype(np.float32), p["loop"])
    raise GnnprepError(f"--operator {name!r}: unknown; expected {_EXPECTED}")
