"""docs/python-api.md stays true: its tour runs as written on the embedded sample."""

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_python_api_tour_runs(tmp_path):
    text = (ROOT / "docs" / "python-api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "docs/python-api.md has no python block"
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(blocks[0], "docs/python-api.md", "exec"), {"__name__": "tour"})
    finally:
        os.chdir(cwd)
    assert (tmp_path / "feats.h5").exists() and (tmp_path / "ring.h5").exists()
