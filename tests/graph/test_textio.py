import gzip

import numpy as np
import pytest

from gnnprep.core.errors import GnnprepError
from gnnprep.graph.sources.textio import TableReader


def read_all(path, **kw):
    chunks = list(TableReader(path, **kw))
    return np.concatenate([c.values for c in chunks]), chunks


@pytest.mark.parametrize("sep", [",", "\t", " ", "  "])
def test_delimiters(tmp_path, sep):
    p = tmp_path / "e.txt"
    p.write_text(f"0{sep}1\n2{sep}3\n4{sep}5\n")
    v, _ = read_all(p, kind="int", ncols=2)
    np.testing.assert_array_equal(v, [[0, 1], [2, 3], [4, 5]])


def test_comments_blank_lines_header_and_line_numbers(tmp_path):
    p = tmp_path / "e.csv"
    p.write_text("# comment\nsrc,dst\n% another\n0,1\n\n2,3\n")
    v, chunks = read_all(p, kind="int", ncols=2)
    np.testing.assert_array_equal(v, [[0, 1], [2, 3]])
    assert chunks[0].line(0) == 4 and chunks[0].line(1) == 6


def test_gzip_and_small_blocks_keep_line_numbers(tmp_path):
    p = tmp_path / "e.csv.gz"
    rows = "\n".join(f"{i},{i + 1}" for i in range(5000)) + "\n"
    with gzip.open(p, "wt") as f:
        f.write(rows.replace("4000,4001", "4000,x"))
    with pytest.raises(GnnprepError, match=r"e.csv.gz line 4001: 'x' is not an integer"):
        read_all(p, kind="int", ncols=2, block_bytes=1 << 12)


def test_column_count_errors(tmp_path):
    p = tmp_path / "e.txt"
    p.write_text("0 1\n1 2 3\n")
    with pytest.raises(GnnprepError, match="line 2: expected 2 columns, found 3"):
        read_all(p, kind="int", ncols=2)
    p.write_text("0 1\n1\n")
    with pytest.raises(GnnprepError, match="line 2: expected 2 columns, found 1"):
        read_all(p, kind="int", ncols=2)


def test_float_nonfinite(tmp_path):
    p = tmp_path / "f.csv"
    p.write_text("0.5,1\n1,inf\n")
    with pytest.raises(GnnprepError, match="line 2: non-finite"):
        read_all(p, kind="float", ncols=None, allow_header=False)


def test_no_trailing_newline(tmp_path):
    p = tmp_path / "e.txt"
    p.write_text("0 1\n2 3")
    v, _ = read_all(p, kind="int", ncols=2)
    assert v.shape == (2, 2)
