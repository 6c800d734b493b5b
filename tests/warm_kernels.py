"""Compile the numba kernels the suite uses most into their on-disk cache before the test workers start
(conftest.py runs this when the suite runs in workers: ``make test`` is ``pytest -n auto``).

On a fresh clone every worker process, and every process a test starts, otherwise compiles the same
kernels at once (the corruption test's four children each compiled them all: 121 s of its run, 31 s
with the cache warm; the whole suite 635 against 491 s on the 2-core CI machine). The commands run
on the embedded sample, in two halves run side by side; a failure here is left for the tests to find.

    python tests/warm_kernels.py precompute|graphs FOLDER
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _halves(d: Path) -> dict[str, list[list[str]]]:
    g, hetero = str(d / "g.h5"), str(d / "hetero.h5")
    ingest = [["ingest", str(ROOT / "sample_data"), "-o", g]]
    return {
        "precompute": ingest + [
            ["precompute", g, "--hops", "2", "-o", str(d / "f1.h5")],
            ["precompute", g, "--hops", "2", "--operator", "rw,sym-noloop,ppr:alpha=0.1,k=3", "--rows", "labeled",
             "--reorder", "community", "-o", str(d / "f2.h5")],
            ["precompute", g, "--hops", "2", "--blocks", "1,2,2", "--reorder", "degree", "--dtype", "float16",
             "-o", str(d / "f3.h5")],
            ["precompute", g, "--hops", "1", "--memory-budget", "200MiB", "--reorder", "none",
             "--normalize-features", "row", "-o", str(d / "f4.h5")],
            ["train", "sgc", str(d / "f1.h5"), "-o", str(d / "r1"), "--epochs", "2"],
            ["train", "sign", str(d / "f2.h5"), "-o", str(d / "r2"), "--epochs", "2"],
        ],
        "graphs": ingest + [
            ["hag", g, "-o", str(d / "h.h5")],
            ["precompute", g, "--hops", "2", "--hag", str(d / "h.h5"), "-o", str(d / "fh.h5")],
            ["hdg", g, "--select", "random-walk:walks=4,length=3,topk=4", "-o", str(d / "w.h5")],
            ["hdg", g, "--select", "hop-shells:2", "-o", str(d / "s.h5")],
            ["hdg", g, "--select", "anchors:sets=4,size=8", "-o", str(d / "a.h5")],
            ["precompute", g, "--hops", "2", "--hdg", str(d / "s.h5"), "--hdg-reduce", "max", "-o", str(d / "fs.h5")],
            ["ingest", str(ROOT / "sample_data" / "hetero"), "-o", hetero],
            ["hdg", hetero, "--select", "metapath:APA=author-paper-author,cap=8", "-o", str(d / "m.h5")],
            ["train", "lc-gprgnn", str(d / "fh.h5"), "-o", str(d / "r3"), "--epochs", "2"],
        ],
    }


def main(half: str, folder: str) -> None:
    from click.testing import CliRunner

    from gnnprep.cli import cli

    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    for args in _halves(d)[half]:
        CliRunner().invoke(cli, [*args, "--quiet"])


if __name__ == "__main__":
    main(*sys.argv[1:])
