"""Streaming numeric text tables (CSV/TSV/whitespace, optionally gzip) with exact line numbers.

Files are read in byte blocks cut at line ends. Each block goes through pandas' C parser (the fast
path); when that fails or the values look wrong, the block is rescanned line by line in Python to
name the first offending line exactly. ``#``/``%`` comment lines and blank lines are skipped, and a
header line whose tokens are all non-numeric is allowed as the first line.
"""

from __future__ import annotations

import gzip
import io
import math
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from gnnprep.core.errors import GnnprepError

BLOCK_BYTES = 32 * 1024**2
MAX_LINE = 1 << 20   # the longest text line read across blocks (a row of numbers is far shorter)
_INT_TOKEN = re.compile(r"([+-]?)([0-9]+)(\.0*)?")   # ASCII digits only (\d also takes '３' and '²')
_NOT_SPACE = re.compile(rb"[^ \t\r\n\x0b\x0c]")   # a byte bytes.strip() keeps: the line has content
_DIGITS_INT64 = 19  # 2**63 - 1 has 19 digits
_NUMERIC = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^[+-]?(nan|inf|infinity)$", re.I | re.A)


def block_bytes_for(chunk_edges: int) -> int:
    """Text block size matching a chunk of about ``chunk_edges`` lines (16 bytes per line)."""
    return max(1 << 16, min(BLOCK_BYTES, chunk_edges * 16))


def open_text(path: Path):
    """Binary stream of a text file, gunzipped when its first bytes are gzip's magic (whatever its
    name says: a gzip file named ``.mtx`` is read, a plain one named ``.mtx.gz`` too)."""
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")
    return open(path, "rb")


@dataclass
class Chunk:
    """Rows parsed from one block, and where they came from."""

    values: np.ndarray          # [rows, cols]
    lines: np.ndarray | None    # 1-based line number of each row, or None when first_line + row
    first_line: int

    def line(self, row: int) -> int:
        return int(self.lines[row]) if self.lines is not None else self.first_line + int(row)


def _blocks(path: Path, block_bytes: int) -> Iterator[tuple[int, bytes]]:
    """Yield (1-based number of the block's first line, block of whole lines)."""
    line_no = 1
    rest = b""
    try:
        with open_text(path) as f:
            while True:
                data = f.read(block_bytes)
                if not data:
                    break
                data = rest + data
                cut = data.rfind(b"\n")
                if cut < 0:
                    if len(data) > MAX_LINE:   # never held whole: a line (or a gzip bomb) of GiBs
                        raise GnnprepError(f"{path} line {line_no}: a line longer than {MAX_LINE // 1024**2} MiB; "
                                           "expected short text lines (one row of numbers each)")
                    rest = data
                    continue
                block, rest = data[: cut + 1], data[cut + 1:]
                _refuse_long_line(path, line_no, block)
                yield line_no, block
                line_no += block.count(b"\n")
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        where = (f"after line {line_no - 1:,}" if line_no > 1 else
                 f"within its first {max(1, block_bytes >> 20):,} MiB of text, before any line was read")
        raise GnnprepError(f"{path}: truncated or corrupt gzip data {where} ({e})") from None
    if rest:
        _refuse_long_line(path, line_no, rest)
        yield line_no, rest + b"\n"


def _refuse_long_line(path: Path, line_no: int, block: bytes) -> None:
    """Refuse a line longer than MAX_LINE in ``block`` (whose first line is ``line_no``), wherever it
    falls against the block cuts. A line that long must hold a whole window of MAX_LINE / 2 bytes
    with no newline, so only such windows are looked at closely: ~2 memchr calls per MiB."""
    half = MAX_LINE // 2
    for w in range(0, len(block) - half + 1, half):
        if block.find(b"\n", w, w + half) >= 0:
            continue
        start = block.rfind(b"\n", 0, w) + 1
        end = block.find(b"\n", w + half)
        if (end if end >= 0 else len(block)) - start > MAX_LINE:
            line = line_no + block.count(b"\n", 0, start)
            raise GnnprepError(f"{path} line {line}: a line longer than "
                               f"{MAX_LINE // 1024**2} MiB; expected short text lines (one row of numbers each)")


def _looks_numeric(tok: str) -> bool:
    # a header token is short; a long one is data (and a regex on a huge token could backtrack)
    return len(tok) > 64 or bool(_NUMERIC.match(tok))


def _show(tok: str, limit: int = 24) -> str:
    """A token for a message: a runaway one is cut, with its length."""
    return tok if len(tok) <= limit else f"{tok[:limit]}... ({len(tok):,} characters)"


def _split(line: str, delim: str | None) -> list[str]:
    return line.split(delim) if delim is not None else line.split()


def detect_delimiter(path: Path) -> str | None:
    """``,`` or tab when the first data line has one, else None (runs of whitespace)."""
    for _, block in _blocks(path, 1024 * 1024):
        for raw in block.split(b"\n"):
            s = raw.strip()
            if not s or s[:1] in (b"#", b"%"):
                continue
            if b"," in s:
                return ","
            if b"\t" in s:
                return "\t"
            return None
    return None


class TableReader:
    """Iterate a numeric text table in chunks.

    kind: ``"int"`` (integers that fit int64, at least ``minimum``; None: any sign) or ``"float"``.
    ncols: required column count, or None to take it from the first data line.
    start_line: lines before this 1-based line are skipped (a preamble parsed by the caller, such as
    a Matrix Market size line).
    """

    def __init__(self, path: str | Path, kind: str, ncols: int | None = None, what: str = "value",
                 block_bytes: int = BLOCK_BYTES, allow_header: bool = True,
                 allow_nan: bool = False, minimum: int | None = 0, start_line: int = 1):
        self.path = Path(path)
        if not self.path.is_file():
            raise GnnprepError(f"{self.path}: no such file")
        self.kind, self.ncols, self.what = kind, ncols, what
        self.block_bytes = block_bytes
        self.allow_header = allow_header
        self.allow_nan = allow_nan
        self.minimum = minimum
        self.start_line = start_line
        self.delim = detect_delimiter(self.path)
        self._seen_data = False
        self._header_line = 0

    # -- slow path: find and report the first bad line of a block ------------------------------
    def _fail(self, line_no: int, msg: str):
        raise GnnprepError(f"{self.path} line {line_no}: {msg}")

    def _check_line(self, line_no: int, tokens: list[str]) -> None:
        if self.ncols is not None and len(tokens) != self.ncols:
            self._fail(line_no, f"expected {self.ncols} column{'s' if self.ncols > 1 else ''}, found {len(tokens)}")
        for tok in tokens:
            if self.kind == "int":
                self._check_int(line_no, tok)
                continue
            try:
                if not tok.isascii():
                    raise ValueError(tok)
                v = float(tok)
            except ValueError:
                self._fail(line_no, f"{_show(tok)!r} is not a number")
            if not math.isfinite(v) and not self.allow_nan:
                self._fail(line_no, f"non-finite {self.what} {_show(tok)!r}")

    def _check_int(self, line_no: int, tok: str) -> None:
        """An integer token within int64 and not below ``minimum`` (never converts a huge token:
        a 1,000,000-digit id is reported by its length, not parsed)."""
        m = _INT_TOKEN.fullmatch(tok)
        if not m:
            if self.allow_nan and tok.lower() in ("nan", ""):
                return
            self._fail(line_no, f"{_show(tok)!r} is not an integer {self.what}")
        digits = m.group(2).lstrip("0") or "0"
        negative = m.group(1) == "-" and digits != "0"
        huge = len(digits) > _DIGITS_INT64 or int(digits) > 2**63 - (0 if negative else 1)
        if negative and self.minimum is not None and (huge or -int(digits) < self.minimum):
            self._fail(line_no, f"negative {self.what} {_show(tok)}" if self.minimum == 0
                       else f"{self.what} {_show(tok)} is below {self.minimum}")
        if huge:
            self._fail(line_no, f"{self.what} {_show(tok)} is too large; expected integers within int64 "
                                "(below 2**63)")

    def _scan(self, first_line: int, block: bytes, detail: str = "") -> None:
        for i, raw in enumerate(block.decode("utf-8", "replace").split("\n")):
            s = raw.strip()
            if not s or s[0] in "#%" or first_line + i == self._header_line or first_line + i < self.start_line:
                continue
            self._check_line(first_line + i, [t.strip() for t in _split(s, self.delim)])
        raise GnnprepError(f"{self.path} lines {first_line}+: cannot parse {self.what}s ({detail})")

    # -- fast path -----------------------------------------------------------------------------
    def _clean(self, first_line: int, block: bytes) -> tuple[bytes, np.ndarray | None]:
        """Drop comments, blank lines and a first-line header; return kept lines' numbers."""
        needs = (b"#" in block or b"%" in block or b"\n\n" in block or block.startswith(b"\n")
                 or (not self._seen_data and self.allow_header) or first_line < self.start_line)
        if not needs:
            return block, None
        kept, numbers = [], []
        line, counted, pos = first_line, 0, 0
        # only the lines with content are visited: blank runs are skipped in C (a block of 32 MiB of
        # blank lines from a tiny .gz took seconds as 33M Python iterations), and the lines are
        # numbered by counting the line ends skipped
        while (m := _NOT_SPACE.search(block, pos)) is not None:
            start = block.rfind(b"\n", 0, m.start()) + 1
            end = block.find(b"\n", m.start())
            end = len(block) if end < 0 else end
            line += block.count(b"\n", counted, start)
            counted, pos = start, end + 1
            raw = block[start:end]
            s = raw.strip()
            if s[:1] in (b"#", b"%") or line < self.start_line:
                continue
            if not self._seen_data:
                self._seen_data = True
                tokens = _split(s.decode("utf-8", "replace"), self.delim)
                if self.allow_header and not any(_looks_numeric(t.strip()) for t in tokens):
                    self._header_line = line
                    continue  # a header such as "src,dst"
            kept.append(raw)
            numbers.append(line)
        return b"\n".join(kept) + b"\n", np.asarray(numbers, dtype=np.int64)

    def _below_minimum(self, values: np.ndarray) -> bool:
        return bool(self.minimum is not None and values.size and values.min() < self.minimum)

    def __iter__(self) -> Iterator[Chunk]:
        import pandas as pd

        for first_line, block in _blocks(self.path, self.block_bytes):
            data, lines = self._clean(first_line, block)
            self._seen_data = True
            if not data.strip():
                continue
            try:
                df = pd.read_csv(io.BytesIO(data), header=None, sep=self.delim if self.delim else r"\s+",
                                 engine="c", dtype=np.float64 if self.kind == "float" or self.allow_nan else np.int64,
                                 skip_blank_lines=True, na_filter=self.kind == "float" or self.allow_nan)
            except (ValueError, pd.errors.ParserError, OverflowError) as e:
                self._scan(first_line, block, str(e).splitlines()[0])
            values = df.to_numpy()
            if self.ncols is None:
                self.ncols = values.shape[1]
            bad = values.shape[1] != self.ncols
            if not bad and self.kind == "int":
                if values.dtype.kind == "f":
                    finite = np.isfinite(values)
                    bad = bool(np.any(values[finite] != np.round(values[finite])))
                    # beyond 2**53 a float is not the id the line holds (a newer pandas gives floats
                    # for a token above int64 where an older one raised): the slow path says which
                    bad = bad or bool(np.any(np.abs(values[finite]) > 2.0**53))
                    bad = bad or self._below_minimum(values[finite]) or (not self.allow_nan and not finite.all())
                elif values.dtype.kind == "u":  # a token in [2**63, 2**64): not an int64
                    bad = bool(values.size and values.max() > np.iinfo(np.int64).max) or self._below_minimum(values)
                elif values.dtype.kind != "i":
                    bad = True
                else:
                    bad = self._below_minimum(values)
            elif not bad and not self.allow_nan:
                bad = not np.isfinite(values).all()
            if bad:
                self._scan(first_line, block, "inconsistent values")
            if lines is not None and len(lines) != len(values):
                self._scan(first_line, block, "row count mismatch")
            yield Chunk(values, lines, first_line)
