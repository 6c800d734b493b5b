"""The fast paths of ingest (stored .npz members read directly, compiled bucketing kernels, hashes
in worker threads, early writeback) store exactly what the plain paths store."""

import zipfile

import h5py
import numpy as np
import pytest
from fixtures import run
from ogb_layouts import make_papers100m_like

from gnnprep.graph.ingest import IngestConfig, ingest
from gnnprep.graph.sources import npzstream

DATASETS = ("adj/indptr", "adj/indices", "nodes/features", "nodes/labels", "splits/train", "splits/valid",
            "splits/test")
FINGERPRINTS = ("fingerprint", "features_fingerprint", "labels_fingerprint", "splits_fingerprint")


def _restore(path, zip64: bool = False) -> None:
    """Rewrite an .npz with stored (uncompressed) members, as ``np.savez`` writes them (ZIP64
    headers forced when asked, as for members over 4 GiB)."""
    with zipfile.ZipFile(path) as zf:
        members = {i.filename: zf.read(i.filename) for i in zf.infolist()}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, data in members.items():
            with zf.open(name, "w", force_zip64=zip64) as f:
                f.write(data)


def _content(path) -> dict:
    with h5py.File(path, "r") as f:
        out = {k: f[k][:] for k in DATASETS}
        out.update({k: f.attrs[k] for k in FINGERPRINTS})
        out["chunks"] = {k: f[k].chunks for k in DATASETS}
    return out


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
            assert a[k].dtype == b[k].dtype, k
        else:
            assert a[k] == b[k], k


@pytest.mark.parametrize("zip64", [False, True])
def test_stored_papers100m_layout_matches_compressed(tmp_path, zip64, monkeypatch):
    """papers100M's archive as np.savez writes it (stored members; ZIP64 for the real sizes) gives
    the same store as the compressed one, through the direct reads and the compiled kernels."""
    from gnnprep.sparse import csr_builder

    truth = make_papers100m_like(tmp_path / "data", n=3000, m=20_000, d=16)
    ingest(str(truth.path), tmp_path / "zip.h5", IngestConfig(memory_budget=8 << 20))
    for name in ("data.npz", "node-label.npz"):
        _restore(truth.path / "raw" / name, zip64)
    with npzstream.NpzReader(truth.path / "raw" / "data.npz") as z:
        assert z._stored("edge_index.npy") is not None and z._stored("node_feat.npy") is not None
    ingest(str(truth.path), tmp_path / "stored.h5", IngestConfig(memory_budget=8 << 20))
    _same(_content(tmp_path / "zip.h5"), _content(tmp_path / "stored.h5"))
    # a large budget with the kernels' size threshold lowered: the compiled bucketing and writing
    monkeypatch.setattr(csr_builder, "KERNEL_MIN_ITEMS", 1000)
    ingest(str(truth.path), tmp_path / "kernels.h5", IngestConfig(memory_budget=1 << 30))
    _same(_content(tmp_path / "zip.h5"), _content(tmp_path / "kernels.h5"))


@pytest.mark.parametrize("budget", ["8MiB", "1GiB"])
@pytest.mark.parametrize("member", ["edge_index", "node_feat"])
def test_corrupt_stored_member_is_one_line_and_leaves_nothing(tmp_path, member, budget, monkeypatch):
    """Found before the last block is handed out: ingest stops with one line, and nothing is left
    (with 1GiB, through the compiled kernels, whose spill writes are in flight at that moment)."""
    from gnnprep.graph import ingest as ingest_module
    from gnnprep.sparse import csr_builder

    monkeypatch.setattr(csr_builder, "KERNEL_MIN_ITEMS", 1000)
    monkeypatch.setattr(ingest_module, "incoming_chunk_edges", lambda budget: 3000)  # several chunks
    truth = make_papers100m_like(tmp_path / "data", n=3000, m=20_000, d=16)
    p = truth.path / "raw" / "data.npz"
    _restore(p)
    with npzstream.NpzReader(p) as z:
        st = z._stored(member + ".npy")
        pos = st.start + z.members[member].data_offset + 5000
    data = bytearray(p.read_bytes())
    data[pos] ^= 0x10
    p.write_bytes(bytes(data))
    out = tmp_path / "out" / "g.h5"
    out.parent.mkdir()
    r = run(["ingest", truth.path, "-o", out, "--memory-budget", budget])
    assert r.exit_code == 1
    assert r.stderr.strip() == f"Error: {p}: member '{member}.npy' is corrupt (Bad CRC-32 for file '{member}.npy')"
    assert not list(out.parent.iterdir()), "no output, temporary file or work folder left"
