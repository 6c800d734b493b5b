"""Matrix Market coordinate files (``.mtx``, ``.mtx.gz``), as the SuiteSparse collection ships them.

Layout (Boisvert, Pozo and Remington, "The Matrix Market Exchange Formats: Initial Design", NIST
1996): a header line ``%%MatrixMarket matrix coordinate <field> <symmetry>``, ``%`` comment lines, a
size line ``rows cols nnz``, then ``nnz`` entry lines ``i j [value]`` with 1-based indices. Accepted:
field ``pattern`` | ``integer`` | ``real``, symmetry ``general`` | ``symmetric`` (only one triangle
stored; the other is implied), and square matrices only (a graph's adjacency).

Entry ``(i, j)`` is the edge ``i-1 -> j-1``: A[i, j] != 0 means j aggregates from i, the convention
of PyG's ``from_scipy_sparse_matrix`` and of an edge list line ``i-1 j-1``. Every stored entry is an
edge; values are checked to be numbers and otherwise not used (an explicit zero is still an edge, as
scipy counts it in ``nnz``). The node count is the matrix size, so isolated nodes are kept.

Entries stream through the edge lists' chunked text reader (:class:`TableReader`), so memory stays
bounded; node features, labels and splits come from ``--features``, ``--labels`` and ``--splits``
exactly as for an edge list.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np

from gnnprep.core.errors import GnnprepError
from gnnprep.graph.sources.edgelist import EdgeListSource
from gnnprep.graph.sources.textio import TableReader, block_bytes_for, open_text

FIELDS = ("pattern", "integer", "real")
SYMMETRIES = ("general", "symmetric")
BANNER = "%%MatrixMarket"
EXPECTED_HEADER = "%%MatrixMarket matrix coordinate <pattern|integer|real> <general|symmetric>"
_MAX_LINE = 1 << 20
_SIZE = re.compile(r"[0-9]{1,19}")
_EXACT_FLOAT = 2**53   # indices read as float64 (field real) are exact below this


def is_matrix_market(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(".mtx") or name.endswith(".mtx.gz")


def _whole_line(path: Path, raw: bytes, line_no: int) -> None:
    """Refuse a header or size line that ``readline`` cut at the length limit (never held whole)."""
    if len(raw) >= _MAX_LINE and not raw.endswith(b"\n"):
        raise GnnprepError(f"{path} line {line_no}: a line longer than {_MAX_LINE // 1024**2} MiB; expected "
                           f"{'the header' if line_no == 1 else 'the size line'} (a short line)")


def _show(line: str, limit: int = 80) -> str:
    line = line.strip()
    return repr(line if len(line) <= limit else line[:limit] + "...")


def read_preamble(path: Path) -> tuple[str, str, int, int, int, int]:
    """(field, symmetry, rows, cols, nnz, size line number) from the header, or a one-line error
    naming the header or size line."""
    line_no = 0
    try:
        with open_text(path) as f:
            raw = f.readline(_MAX_LINE)
            line_no = 1
            _whole_line(path, raw, line_no)
            head = raw.decode("utf-8", "replace")
            tokens = head.split()
            if not tokens or tokens[0].lower() != BANNER.lower():
                raise GnnprepError(f"{path} line 1: expected the header '{EXPECTED_HEADER}', found {_show(head)}")
            if len(tokens) != 5:
                raise GnnprepError(f"{path} line 1: header with {len(tokens)} words; expected '{EXPECTED_HEADER}'")
            obj, fmt, field, symmetry = (t.lower() for t in tokens[1:])
            if obj != "matrix":
                raise GnnprepError(f"{path} line 1: object {tokens[1]!r} is not supported; expected 'matrix'")
            if fmt != "coordinate":
                raise GnnprepError(f"{path} line 1: format {tokens[2]!r} is not supported (a dense array is not a "
                                   "graph's adjacency); expected 'coordinate'")
            if field not in FIELDS:
                raise GnnprepError(f"{path} line 1: field {tokens[3]!r} is not supported; expected "
                                   f"{', '.join(FIELDS)}")
            if symmetry not in SYMMETRIES:
                raise GnnprepError(f"{path} line 1: symmetry {tokens[4]!r} is not supported; expected "
                                   f"{' or '.join(SYMMETRIES)}")
            while True:
                raw = f.readline(_MAX_LINE)
                line_no += 1
                if not raw:
                    raise GnnprepError(f"{path} line {line_no}: end of file; expected the size line 'rows cols nnz'")
                s = raw.decode("utf-8", "replace").strip()
                if not s or s.startswith("%"):
                    while not raw.endswith(b"\n") and raw:   # the rest of a very long comment line
                        raw = f.readline(_MAX_LINE)
                    continue
                _whole_line(path, raw, line_no)
                break
    except (EOFError, OSError, zlib.error) as e:
        if isinstance(e, GnnprepError):
            raise
        where = f"after line {line_no}" if line_no else "before its first line was read"
        raise GnnprepError(f"{path}: truncated or corrupt data {where} ({e})") from None
    parts = s.split()
    # ASCII digits only (str.isdigit() takes '³' and '３'), at most 19 of them (int64)
    if len(parts) != 3 or not all(_SIZE.fullmatch(p) for p in parts):
        raise GnnprepError(f"{path} line {line_no}: expected the size line 'rows cols nnz' (three non-negative "
                           f"integers), found {_show(s)}")
    rows, cols, nnz = (int(p) for p in parts)
    if rows == 0:
        raise GnnprepError(f"{path} line {line_no}: a 0 x 0 matrix; expected at least one node")
    if rows != cols:
        raise GnnprepError(f"{path} line {line_no}: a {rows} x {cols} matrix; expected a square adjacency "
                           "matrix (rows == columns)")
    if symmetry == "symmetric" and nnz > rows * (rows + 1) // 2:
        raise GnnprepError(f"{path} line {line_no}: {nnz} entries cannot fit one triangle of a {rows} x {rows} "
                           "symmetric matrix")
    return field, symmetry, rows, cols, nnz, line_no


class MatrixMarketSource(EdgeListSource):
    """A ``.mtx``/``.mtx.gz`` coordinate matrix as the adjacency (see the module docstring)."""

    def _array_info(self) -> None:
        field, symmetry, n, _, nnz, size_line = read_preamble(self.path)
        self.field, self.symmetry, self.size_line = field, symmetry, size_line
        where = f"the size line of {self.path} (line {size_line})"
        if self.num_nodes is not None and self.num_nodes != n:
            raise GnnprepError(f"{self.path} line {size_line}: a {n} x {n} matrix, but {self.nodes_from} gives "
                               f"{self.num_nodes} nodes; expected the same node count")
        self.num_nodes, self.nodes_from = n, where
        self.expected_edges = nnz
        self.stored_directed = symmetry == "general"   # symmetric: one triangle stored, add the inverses

    def edges(self, chunk_edges: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        n, nnz, path = self.num_nodes, self.expected_edges, self.path
        reader = TableReader(path, "float" if self.field == "real" else "int", 2 if self.field == "pattern" else 3,
                             what="entry value" if self.field != "pattern" else "index",
                             block_bytes=block_bytes_for(chunk_edges), allow_header=False,
                             minimum=None, start_line=self.size_line + 1)   # indices checked below
        reader.delim = None   # whitespace-separated, whatever the size line looks like
        seen = 0
        for chunk in reader:
            v = chunk.values
            if seen + len(v) > nnz:
                raise GnnprepError(f"{path} line {chunk.line(nnz - seen)}: more entries than the {nnz} declared "
                                   f"on the size line (line {self.size_line})")
            ij = v[:, :2]
            if ij.dtype.kind == "f":
                bad = (ij != np.floor(ij)) | (ij >= _EXACT_FLOAT)
                if bad.any():
                    r = int(np.argmax(bad.any(axis=1)))
                    raise GnnprepError(f"{path} line {chunk.line(r)}: index {_num(ij[r][bad[r]][0])} is not an "
                                       "integer row/column index")
            bad = (ij < 1) | (ij > n)
            if bad.any():
                r = int(np.argmax(bad.any(axis=1)))
                c = int(np.argmax(bad[r]))
                raise GnnprepError(f"{path} line {chunk.line(r)}: {('row', 'column')[c]} index {_num(ij[r, c])} is "
                                   f"outside 1..{n} (the size line, line {self.size_line}); indices are 1-based")
            ij = ij.astype(np.int64) - 1
            seen += len(v)
            yield np.ascontiguousarray(ij[:, 0]), np.ascontiguousarray(ij[:, 1])
        if seen != nnz:
            raise GnnprepError(f"{path}: {seen} entries, but the size line (line {self.size_line}) declares {nnz}")


def _num(x) -> str:
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 2**63 else repr(x)
