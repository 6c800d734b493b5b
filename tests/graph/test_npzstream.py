import io
import zipfile
import zlib

import numpy as np
import pytest

from gnnprep.core.errors import GnnprepError
from gnnprep.graph.sources import npzstream
from gnnprep.graph.sources.npzstream import NpzReader, crc32_combine


@pytest.mark.parametrize("compressed", [True, False])
@pytest.mark.parametrize("layout", ["2xm", "mx2", "2xm_fortran", "mx2_fortran"])
def test_edge_pairs_stream_like_np_load(tmp_path, rng, compressed, layout):
    ei = rng.integers(0, 1000, (2, 10_001))
    arr = {"2xm": ei, "mx2": ei.T.copy(), "2xm_fortran": np.asfortranarray(ei),
           "mx2_fortran": np.asfortranarray(ei.T)}[layout]
    p = tmp_path / "d.npz"
    (np.savez_compressed if compressed else np.savez)(p, edge_index=arr, node_feat=rng.random((50, 3)))
    with NpzReader(p) as z:
        pairs = list(z.iter_edge_pairs("edge_index", 777))
        src = np.concatenate([a for a, _ in pairs])
        dst = np.concatenate([b for _, b in pairs])
        np.testing.assert_array_equal(src, ei[0])
        np.testing.assert_array_equal(dst, ei[1])
        rows = np.concatenate(list(z.iter_rows("node_feat", 7)))
        np.testing.assert_array_equal(rows, np.load(p)["node_feat"])


def test_missing_member_and_bad_archive(tmp_path):
    p = tmp_path / "d.npz"
    np.savez_compressed(p, a=np.arange(3))
    with NpzReader(p) as z, pytest.raises(GnnprepError, match="missing array 'edge_index'"):
        z.require("edge_index")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(GnnprepError, match="not a valid .npz"):
        NpzReader(bad)


def test_truncated_member_is_reported(tmp_path, rng):
    p = tmp_path / "d.npz"
    np.savez(p, edge_index=rng.integers(0, 9, (2, 100_000)))
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(GnnprepError):
        with NpzReader(p) as z:
            for _ in z.iter_edge_pairs("edge_index", 1000):
                pass


# --- stored members: positional reads into the arrays handed out, CRC still checked -------------



def _npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def _write_npz(path, members: dict, zip64: bool = False, compress=zipfile.ZIP_STORED, extra=b""):
    """An .npz written member by member (ZIP64 headers forced when asked; ``extra`` appended to
    every member after its .npy payload)."""
    with zipfile.ZipFile(path, "w", compression=compress, allowZip64=True) as zf:
        for key, a in members.items():
            with zf.open(key + ".npy", "w", force_zip64=zip64) as f:
                f.write(_npy_bytes(a) + extra)


def _through_zipfile(monkeypatch):
    """Make NpzReader read stored members through zipfile, as before the direct path."""
    monkeypatch.setattr(npzstream.NpzReader, "_stored", lambda self, name: None)


def _read_all(p, chunk=7, reuse=False):
    with npzstream.NpzReader(p) as z:
        rows = [b.copy() for b in z.iter_rows("x", chunk, reuse=reuse)]
        pairs = [(a.copy(), b.copy()) for a, b in z.iter_edge_pairs("e", chunk, reuse=reuse)]
    return rows, pairs


def test_crc32_combine_matches_zlib(rng):
    data = rng.integers(0, 256, 5000, dtype=np.uint8).tobytes()
    for cut in (0, 1, 7, 2500, 4999, 5000):
        a, b = data[:cut], data[cut:]
        assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(data)


@pytest.mark.parametrize("zip64", [False, True])
@pytest.mark.parametrize("reuse", [False, True])
def test_stored_members_read_directly_like_np_load(tmp_path, rng, zip64, reuse):
    x = rng.standard_normal((101, 3)).astype(np.float32)
    e = rng.integers(0, 50, (2, 103))
    p = tmp_path / "d.npz"
    _write_npz(p, {"x": x, "e": e, "f": e.T.copy()}, zip64=zip64)
    with npzstream.NpzReader(p) as z:
        assert z._stored("x.npy") is not None, "a stored member must take the direct path"
    rows, pairs = _read_all(p, reuse=reuse)
    np.testing.assert_array_equal(np.concatenate(rows), x)
    np.testing.assert_array_equal(np.concatenate([a for a, _ in pairs]), e[0])
    np.testing.assert_array_equal(np.concatenate([b for _, b in pairs]), e[1])
    with npzstream.NpzReader(p) as z:
        pairs = list(z.iter_edge_pairs("f", 10))
        np.testing.assert_array_equal(np.concatenate([a for a, _ in pairs]), e[0])
        np.testing.assert_array_equal(z.load_small("e"), e)


def test_reused_blocks_alternate_between_two_arrays(tmp_path, rng):
    x = rng.standard_normal((50, 4))
    p = tmp_path / "d.npz"
    np.savez(p, x=x)
    with npzstream.NpzReader(p) as z:
        seen = [b.__array_interface__["data"][0] for b in z.iter_rows("x", 10, reuse=True)]
    assert len(set(seen)) == 2


@pytest.mark.parametrize("dtype", [">i8", "<u4", np.float16, np.int16])
def test_stored_dtypes_shapes_and_trailing_bytes(tmp_path, rng, dtype):
    x = rng.integers(0, 100, (33, 2, 3)).astype(dtype)
    e = rng.integers(0, 60, (2, 41)).astype(dtype if np.dtype(dtype).kind in "iu" else np.int64)
    p = tmp_path / "d.npz"
    _write_npz(p, {"x": x, "e": e, "empty": np.empty((0, 4), dtype)}, extra=b"trailing bytes")
    rows, pairs = _read_all(p, chunk=5)
    np.testing.assert_array_equal(np.concatenate(rows), x)
    assert rows[0].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.concatenate([b for _, b in pairs]), e[1])
    with npzstream.NpzReader(p) as z:
        assert list(z.iter_rows("empty", 3)) == []


@pytest.mark.parametrize("rows", [40, 4000])
@pytest.mark.parametrize("where", ["x", "e_row0", "e_row1", "header", "trailing"])
def test_corrupt_stored_member_fails_like_zipfile(tmp_path, rng, monkeypatch, where, rows):
    """A flipped byte anywhere in a member (payload, .npy header padding, trailing bytes) is the
    same one-line error as through zipfile: when the archive is opened for a member zipfile reads
    whole with the header (< 4 KiB), else before the last block is handed out."""
    x = rng.standard_normal((rows, 3))
    e = rng.integers(0, 50, (2, rows))
    p = tmp_path / "d.npz"
    _write_npz(p, {"x": x, "e": e}, extra=b"tail")
    data = bytearray(p.read_bytes())
    member = {"x": "x", "e_row0": "e", "e_row1": "e", "header": "x", "trailing": "e"}[where]
    with zipfile.ZipFile(p) as zf:
        info = zf.getinfo(member + ".npy")
    head = npzstream._LOCAL_HEADER.unpack(bytes(data[info.header_offset:info.header_offset + 30]))
    start = info.header_offset + 30 + head[10] + head[11]
    with npzstream.NpzReader(p) as z:
        off = z.members[member].data_offset
    pos = {"x": start + off + 100, "e_row0": start + off + 8 * 3, "e_row1": start + off + 8 * (rows + 3),
           "header": start + off - 2, "trailing": start + info.file_size - 1}[where]
    data[pos] ^= 0x01
    p.write_bytes(bytes(data))
    errors = []
    for direct in (True, False):
        if not direct:
            _through_zipfile(monkeypatch)
        with pytest.raises(GnnprepError) as exc:
            with npzstream.NpzReader(p) as z:
                if member == "x":
                    list(z.iter_rows("x", 7))
                else:
                    list(z.iter_edge_pairs("e", 7))
        errors.append(str(exc.value))
    assert errors[0] == errors[1]
    assert str(p) in errors[0]
    if where != "header" or rows == 40:  # a large member's broken header fails as not .npy first
        assert f"member '{member}.npy' is corrupt (Bad CRC-32" in errors[0]


def test_stored_member_beyond_the_file_is_truncated(tmp_path, rng):
    p = tmp_path / "d.npz"
    np.savez(p, x=rng.standard_normal((30, 2)))
    with npzstream.NpzReader(p) as z:
        st = z._stored("x.npy")
        st.size += 10_000  # as if the archive had been cut inside the member
        with pytest.raises(GnnprepError, match=r"member 'x\.npy' is truncated"):
            st.read_into(np.empty(st.size, dtype=np.uint8), 0, 0)


def test_stopping_early_leaves_nothing_running(tmp_path, rng):
    p = tmp_path / "d.npz"
    np.savez(p, x=rng.standard_normal((1000, 2)), e=rng.integers(0, 9, (2, 1000)))
    z = npzstream.NpzReader(p)
    it = z.iter_rows("x", 10, reuse=True)
    next(it)
    pairs = z.iter_edge_pairs("e", 10, reuse=True)
    next(pairs)
    it.close()
    pairs.close()  # waits for the block read ahead, so the file can be closed under it
    z.close()
    import threading
    assert not [t for t in threading.enumerate() if t.name.startswith("npz-read")]
