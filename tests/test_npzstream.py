import numpy as np
import pytest

from gnnprep.errors import GnnprepError
from gnnprep.npzstream import NpzReader


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
