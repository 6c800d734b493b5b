"""Dataset specs: what a user may name wherever a dataset is expected.

``sample`` | ``ogbn-<name>`` (under --root, $GNNPREP_DATA or ./data) | an OGB raw-layout folder |
a GraphSAINT layout folder (``adj_full.npz``, ``feats.npy``, ``class_map.json``, ``role.json``) |
an edge list (.csv/.tsv/.txt[.gz], .npy, .npz) | a ``scipy.sparse.save_npz`` matrix (.npz) |
a Matrix Market coordinate file (.mtx[.gz]) | an existing graph store (.h5).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import h5py

from gnnprep.core.errors import GnnprepError
from gnnprep.core.files import kind_of
from gnnprep.graph.sources.base import GraphSource
from gnnprep.graph.sources.edgelist import EdgeListSource, is_text_edge_list
from gnnprep.graph.sources.graphsaint import GraphSaintSource, graphsaint_folder
from gnnprep.graph.sources.matrixmarket import MatrixMarketSource, is_matrix_market
from gnnprep.graph.sources.ogb import detect_layout, open_ogb_folder
from gnnprep.graph.sources.scipynpz import SparseNpzSource, is_scipy_sparse_npz

__all__ = ["SourceOptions", "GraphSource", "open_source", "sample_data_dir", "resolve_spec", "source_kind"]


@dataclass(frozen=True)
class SourceOptions:
    root: str | None = None           # where ogbn-* folders live
    download: bool = False            # allow ogb to download a missing ogbn-* data set
    split: str | None = None          # split folder name when there are several
    index_base: int = 0
    num_nodes: int | None = None
    features: str | None = None
    labels: str | None = None
    splits: str | None = None


def sample_data_dir() -> Path:
    return Path(__file__).resolve().parents[3] / "sample_data"


def data_root(opts: SourceOptions) -> Path:
    return Path(opts.root or os.environ.get("GNNPREP_DATA") or "data").absolute()


def _download(name: str, root: Path) -> None:
    """Fetch an OGB data set with the ogb package; only ever called with --download."""
    import ogb.nodeproppred.dataset as ogb_dataset

    ogb_dataset.decide_download = lambda url: True  # never prompt: the user asked by passing --download
    root.mkdir(parents=True, exist_ok=True)
    try:
        ogb_dataset.NodePropPredDataset(name, root=str(root))
    except ValueError as e:
        raise GnnprepError(f"{name}: not an OGB node-property data set ({str(e).splitlines()[0]})") from None
    except OSError as e:
        raise GnnprepError(f"{name}: download failed ({e})") from None


def resolve_spec(spec: str, opts: SourceOptions = SourceOptions()) -> Path:
    """Map a spec to the file or folder it names, or raise saying where we looked."""
    if spec == "sample":
        d = sample_data_dir()
        if not d.is_dir():
            raise GnnprepError(f"sample: embedded sample data not found at {d}; "
                               "regenerate it with python benchmarks/make_sample_data.py")
        return d
    if spec.startswith("ogbn-") and not Path(spec).exists():
        root = data_root(opts)
        folder = root / spec.replace("-", "_")
        if not folder.is_dir() or detect_layout(folder) is None:
            if not opts.download:
                raise GnnprepError(f"{spec}: not found; looked in {folder}. Put the unzipped OGB folder "
                                   f"there, point --root or $GNNPREP_DATA at its parent, or pass --download")
            _download(spec, root)
        return folder
    path = Path(spec)
    if not path.exists():
        raise GnnprepError(f"{spec}: no such file or folder, and not a data set name "
                           "(expected sample, ogbn-<name>, an OGB or GraphSAINT folder, an edge list, a .npz or .mtx "
                           "matrix, or a graph store)")
    return path


def is_graph_store(path: Path) -> bool:
    return path.is_file() and h5py.is_hdf5(path)


def source_kind(path: Path) -> str:
    """What an existing file or folder is: ``store`` | ``graphsaint`` | ``folder`` (OGB) | ``matrix``
    (a .mtx or save_npz file: the node count comes with it) | ``edges`` (anything else: an edge list,
    or unknown, which :func:`open_source` reports). Reads at most a file's first bytes or zip directory."""
    if path.is_dir():
        return "graphsaint" if graphsaint_folder(path) is not None else "folder"
    if is_graph_store(path):
        return "store"
    if is_matrix_market(path) or is_scipy_sparse_npz(path):
        return "matrix"
    return "edges"


def open_source(spec: str, opts: SourceOptions = SourceOptions()) -> GraphSource | Path:
    """A :class:`GraphSource` to ingest, or the path of an existing HDF5 store to use as is."""
    path = resolve_spec(spec, opts)
    mode = path.stat().st_mode
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):   # (a named pipe, read, would block or be consumed)
        raise GnnprepError(f"{path}: is {kind_of(mode)}; expected a file or an OGB or GraphSAINT folder")
    if path.is_dir():
        if spec != "sample" and graphsaint_folder(path) is not None:
            return GraphSaintSource(path)
        src = open_ogb_folder(path, opts.split)
        if spec == "sample":
            src.name = "sample"
        return src
    if is_graph_store(path):
        return path
    name = path.name.lower()
    node_data = dict(features=Path(opts.features) if opts.features else None,
                     labels=Path(opts.labels) if opts.labels else None,
                     splits=Path(opts.splits) if opts.splits else None)
    if is_matrix_market(path):
        return MatrixMarketSource(path, **node_data)
    if is_scipy_sparse_npz(path):
        return SparseNpzSource(path, **node_data)
    if is_text_edge_list(path) or name.endswith((".npy", ".npz")):
        return EdgeListSource(path, index_base=opts.index_base, num_nodes=opts.num_nodes, **node_data)
    if path.stat().st_size == 0:
        raise GnnprepError(f"{path}: empty file")
    raise GnnprepError(f"{path}: unknown input type; expected an edge list (.csv, .tsv, .txt, optionally .gz; "
                       ".npy; .npz), a scipy sparse matrix (.npz from save_npz), a Matrix Market file (.mtx, "
                       ".mtx.gz), an OGB or GraphSAINT folder or a graph store (.h5)")
