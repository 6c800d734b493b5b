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

- ``ppr:alpha=A,k=K``: the personalised-PageRank diffusion of APPNP (Klicpera et al., "Predict then
  Propagate", ICLR 2019) truncated at K power-iteration steps over Ŝ = ``sym``:
  P = Σ_{i<K} α(1-α)^i Ŝ^i + (1-α)^K Ŝ^K, so hop 1 is APPNP's propagation of X (z ← (1-α) Ŝ z + α X,
  K times) and hop j is P^j X. Each hop is K passes of the ``sym`` kernel with (1-α) folded into the
  row scaling and the restart α·H_{j-1} added to each row block as it finishes (one more column-block
  buffer). Defaults α = 0.1, K = 10 (APPNP's).

A is the stored adjacency: symmetric, binary, loop-free (see :mod:`gnnprep.graph.store`). With edge weights
(``/adj/weights``) the degree becomes the weighted row sum; the kernel then reads the weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnnprep.core.errors import OptionError

OPERATORS = ("sym", "rw", "sym-noloop")


@dataclass(frozen=True)
class Operator:
    name: str
    left: np.ndarray    # l [n] float32
    right: np.ndarray   # r [n] float32
    loop: float         # λ
    # the CSR values the kernels read: "stored" (the store's /adj/weights, if any: the built-ins),
    # "none" (a user operator that does not read w), or "edge" (``edge`` computes them)
    values: str = "stored"
    edge: object = None  # gnnprep.precompute.user_operators.EdgeValues (values == "edge")
    reduce: str = "sum"  # sum (mean is a row scaling) | max (its own kernel)
    steps: int = 1       # passes of the kernel per hop (ppr: K)
    restart: float = 0.0  # α: after each pass, z += α H_{j-1} (ppr)

    def dense(self, adjacency) -> np.ndarray:
        """S as a dense float64 matrix (tests only)."""
        a = np.asarray(adjacency.todense() if hasattr(adjacency, "todense") else adjacency, dtype=np.float64)
        a = a + self.loop * np.eye(a.shape[0])
        return self.left.astype(np.float64)[:, None] * a * self.right.astype(np.float64)[None, :]


NORM = "norm"
NORM_KEYS = {"a": 0.5, "b": 0.5, "loop": 1.0}
PPR = "ppr"
PPR_KEYS = {"alpha": 0.1, "k": 10.0}
FAMILIES = {NORM: NORM_KEYS, PPR: PPR_KEYS}   # operators with parameters: "<family>:key=value,..."
_EXPECTED = f"one or more of {', '.join(OPERATORS)}, {NORM}:a=A,b=B,loop=L, {PPR}:alpha=A,k=K"


def _family(spec: str) -> str | None:
    head, colon, _ = spec.partition(":")
    return head if colon and head in FAMILIES else None


def _check_value(spec: str, item: str, key: str, v: float, text: str) -> None:
    if not np.isfinite(v) or (key not in ("alpha", "k") and abs(v) > 16):
        raise OptionError("--operator", f"{spec!r}: {item!r}: expected a finite number in -16..16")
    if key == "loop" and v < 0:
        raise OptionError("--operator", f"{spec!r}: loop={text}: expected >= 0")
    if key == "alpha" and not 0 < v <= 1:
        raise OptionError("--operator", f"{spec!r}: alpha={text}: expected a restart probability in (0, 1]")
    if key == "k" and (v != int(v) or not 1 <= v <= 1000):
        raise OptionError("--operator", f"{spec!r}: k={text}: expected a whole number of steps in 1..1000")


def spec_values(spec: str) -> dict[str, float]:
    """The parameters of a ``norm:`` or ``ppr:`` spec (defaults filled in), or an OptionError naming
    what is wrong."""
    family = _family(spec)
    keys = FAMILIES[family]
    values = dict(keys)
    given: set[str] = set()
    body = spec[len(family) + 1:]
    for item in filter(None, (t.strip() for t in body.split(","))):
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or key not in keys:
            names = [f"{k}=" for k in keys]
            raise OptionError("--operator", f"{spec!r}: {item!r}: expected "
                              + (", ".join(names[:-1]) + " or " if len(names) > 1 else "") + names[-1]
                              + " with a number")
        try:
            v = float(text)
        except ValueError:
            raise OptionError("--operator", f"{spec!r}: {item!r}: expected a number after {key}=") from None
        _check_value(spec, item, key, v, text)
        if key in given:
            raise OptionError("--operator", f"{spec!r}: {key}= is given twice; expected each key once")
        given.add(key)
        values[key] = v
    return values


def _norm_name(spec: str) -> str:
    """The canonical name of a ``norm:`` or ``ppr:`` spec: every key, in order, the shortest text
    that reads back as the same float (two specs share a name only when they compute the same)."""
    values = spec_values(spec)
    return f"{_family(spec)}:" + ",".join(f"{k}={_shortest(v)}" for k, v in values.items())


def _shortest(v: float) -> str:
    short = f"{v:g}"
    return short if float(short) == v else repr(float(v))


def split_operators(text: str) -> list[str]:
    """Comma-separated names (operators or channels), where a ``norm:`` or ``ppr:`` spec's own
    ``key=value`` items, which contain commas too, stay with it; such specs come back canonical."""
    names: list[str] = []
    for token in (t.strip() for t in text.split(",")):
        if not token:
            continue
        if "=" in token and ":" not in token and names and _family(names[-1]):
            names[-1] += "," + token          # a further key of the spec before it
        else:
            names.append(token)
    return [_norm_name(s) if _family(s) else s for s in names]


def parse_operators(text: str) -> tuple[str, ...]:
    """Operator names from ``--operator`` (:func:`split_operators`), each a known operator."""
    names = split_operators(text)
    for s in names:
        if not _family(s) and s not in OPERATORS:
            # (a user's function is named by its --operator-file alone: `--operator f` for it was refused
            # with no word of why)
            hint = (" (a function of --operator-file FILE.py:NAME is the channel NAME already: leave it out of "
                    "--operator)" if s.isidentifier() else "")
            raise OptionError("--operator", f"{s!r}: unknown; expected {_EXPECTED}{hint}")
    if not names:
        raise OptionError("--operator", f"empty; expected {_EXPECTED}", sep=": ")
    if len(set(names)) != len(names):
        raise OptionError("--operator", f"{text!r}: an operator is named twice")
    return tuple(names)


def parse_channels(text: str) -> tuple[str, ...]:
    """Channel names from ``train``'s and ``tune``'s ``--operator`` (:func:`split_operators`): at least
    one, none twice (whether the features file holds them is checked when it is opened)."""
    names = split_operators(text)
    if not names:
        raise OptionError("--operator", "empty; expected channel names of the features file, comma-separated",
                          sep=": ")
    if len(set(names)) != len(names):
        raise OptionError("--operator", f"{text!r}: a channel is named twice")
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
        raise OptionError("--operator", f"{name}: needs a symmetric graph store; this one was ingested with "
                                        "--directed (use --operator rw, or ingest without --directed)")
    if name == "sym":
        s = _inv_pow(deg + 1.0, 0.5).astype(np.float32)
        return Operator(name, s, s, 1.0)
    if name == "rw":
        return Operator(name, _inv_pow(deg + 1.0, 1.0).astype(np.float32), np.ones(len(deg), np.float32), 1.0)
    if name == "sym-noloop":
        s = _inv_pow(deg, 0.5).astype(np.float32)
        return Operator(name, s, s, 0.0)
    if _family(name) == NORM:
        p = spec_values(name)
        d = deg + p["loop"]
        return Operator(_norm_name(name), _inv_pow(d, p["a"]).astype(np.float32),
                        _inv_pow(d, p["b"]).astype(np.float32), p["loop"])
    if _family(name) == PPR:
        if not symmetric:
            raise OptionError("--operator", f"{name}: diffuses over sym, which needs a symmetric graph store; this "
                                            "one was ingested with --directed")
        p = spec_values(name)
        s = _inv_pow(deg + 1.0, 0.5)
        return Operator(_norm_name(name), (s * (1.0 - p["alpha"])).astype(np.float32), s.astype(np.float32), 1.0,
                        steps=int(p["k"]), restart=p["alpha"])
    raise OptionError("--operator", f"{name!r}: unknown; expected {_EXPECTED}")
