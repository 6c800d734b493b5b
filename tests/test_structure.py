"""The house's structure: one package per pipeline stage, imports running one way

    core ← sparse ← graph ← {hag, hdg} ← precompute ← train ← (gnnprep.info) ← cli

(a later stage may import an earlier one, never the reverse, counting imports inside functions;
hag and hdg are siblings and import neither each other), no module reaching into another module's
``_private`` names, a small top level, and docs/internals.md's "Where things live" listing every module.
Each rule is also run on a deliberately broken snippet, so a rule that could never fail fails here.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gnnprep"

# rank of each stage; a module may import gnnprep.X only when X's rank is lower, or X is its own stage
RANK = {"core": 0, "sparse": 1, "graph": 2, "hag": 3, "hdg": 3, "precompute": 4, "train": 5,
        "info": 6, "propagate": 6, "cli": 7, "__main__": 8}


def stage_of(module: str) -> str | None:
    """The stage of a dotted module name under gnnprep (None for the bare package, whose
    ``__init__`` holds only the version and the one-release aliases of moved modules)."""
    parts = module.split(".")
    if parts[0] != "gnnprep" or len(parts) == 1:
        return None
    return parts[1]


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(tree: ast.AST, module: str, is_package: bool):
    """(line, imported module, imported name or None) for every import, absolute or relative,
    at any depth (inside functions too)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[:len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                yield node.lineno, target, a.name


def direction_violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """Imports of ``module`` (dotted, under gnnprep) that run against the stage order."""
    own = stage_of(module)
    if own is None:
        return []
    out = []
    for line, target, name in imported_modules(ast.parse(source), module, is_package):
        if target == "gnnprep" and name is not None and name != "__version__":
            target = f"gnnprep.{name}"  # `from gnnprep import precompute` imports the stage
        other = stage_of(target)
        if other is None or other == own:
            continue
        if other not in RANK:
            out.append(f"{module}:{line}: imports {target}, which is no stage")
        elif RANK[other] >= RANK[own]:
            out.append(f"{module}:{line}: {own} imports {target} ({other} is not an earlier stage)")
    return out


def defined_private_names(tree: ast.AST) -> set[str]:
    """``_names`` a module defines: top-level and class functions/assignments, ``self._x = ...``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Name):
                        names.add(sub.id)
                    elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) \
                            and sub.value.id in ("self", "cls"):
                        names.add(sub.attr)
    return {n for n in names if n.startswith("_") and not n.endswith("__")}


def private_violations(source: str, module: str, privates_elsewhere: set[str], is_package: bool = False) -> list[str]:
    """Uses of another module's ``_private`` names: imported by name, read off an imported gnnprep
    module, or read off an object (``graph._indices``) when only another gnnprep module defines it."""
    tree = ast.parse(source)
    own = defined_private_names(tree)
    module_aliases = {}
    out = []
    for line, target, name in imported_modules(tree, module, is_package):
        if not target.startswith("gnnprep"):
            continue
        if name is not None and name.startswith("_") and not name.endswith("__"):
            out.append(f"{module}:{line}: imports {target}.{name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("gnnprep."):
                    module_aliases[a.asname or a.name.split(".")[0]] = a.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gnnprep"):
            for a in node.names:
                module_aliases.setdefault(a.asname or a.name, f"{node.module}.{a.name}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.endswith("__"):
            continue
        v = node.value
        if isinstance(v, ast.Name) and v.id in ("self", "cls"):
            continue
        if isinstance(v, ast.Name) and v.id in module_aliases:
            out.append(f"{module}:{node.lineno}: reads {module_aliases[v.id]}.{node.attr}")
        elif node.attr not in own and node.attr in privates_elsewhere:
            out.append(f"{module}:{node.lineno}: reads {ast.unparse(node)} (private to another module)")
    return out


def _library_files():
    return sorted(PACKAGE.rglob("*.py"))


def test_imports_run_one_way():
    bad = []
    for path in _library_files():
        bad += direction_violations(path.read_text(), module_name(path), path.name == "__init__.py")
    assert bad == []


def test_no_module_uses_another_modules_private_names():
    files = _library_files() + sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "scripts").glob("*.py"))
    defined = {p: defined_private_names(ast.parse(p.read_text())) for p in _library_files()}
    bad = []
    for path in files:
        elsewhere = set().union(*(names for p, names in defined.items() if p != path))
        bad += private_violations(path.read_text(), module_name(path), elsewhere, path.name == "__init__.py")
    assert bad == []


def test_the_rules_fail_on_a_violation():
    assert direction_violations("from gnnprep.precompute.plan import Plan\n", "gnnprep.graph.store")
    assert direction_violations("def f():\n    from gnnprep.train import trainer\n", "gnnprep.precompute.run")
    assert direction_violations("from gnnprep import train\n", "gnnprep.hag.builder")
    assert direction_violations("from gnnprep.hdg.structure import Hdg\n", "gnnprep.hag.file")   # siblings
    assert direction_violations("from ..cli import common\n", "gnnprep.train.trainer")
    assert not direction_violations("from gnnprep.core.errors import GnnprepError\n", "gnnprep.hag.file")
    assert not direction_violations("from gnnprep import __version__\n", "gnnprep.core.artifact")
    assert private_violations("from gnnprep.precompute.run import _prepare\n", "gnnprep.precompute.sharded", set())
    assert private_violations("import gnnprep.train.batches as b\nb._take(1)\n", "gnnprep.train.trainer", set())
    assert private_violations("def f(g):\n    return g._indices\n", "gnnprep.precompute.hop_loop", {"_indices"})
    assert not private_violations("class A:\n    def f(self, o):\n        self._x = 1\n        return o._x\n",
                                  "gnnprep.precompute.plan", {"_x"})
    assert not private_violations("import os\nos._exit(0)\n", "gnnprep.core.distributed", set())


def test_the_top_level_is_small():
    entries = sorted(p.name for p in PACKAGE.iterdir()
                     if p.name not in ("__init__.py", "__main__.py", "__pycache__") and not p.name.startswith("."))
    assert len(entries) <= 10, entries


MODULE_TABLES = ROOT / "docs" / "internals.md"


def _listed_modules(text: str) -> dict[str, set[str]]:
    """Package (``gnnprep/<pkg>/``, or ``gnnprep/`` for the top level) -> the modules its table in
    the "Where things live" section of ``text`` lists (first column, each name in backticks)."""
    assert "## Where things live" in text, "no 'Where things live' section"
    section = text.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    tables, current = {}, None
    for line in section.splitlines():
        m = re.match(r"^### `(gnnprep/(?:[a-z_/]+/)?)`", line)
        if m:
            current = tables.setdefault(m.group(1), set())
        elif current is not None and line.startswith("| `"):
            current.update(re.findall(r"`([a-z_]+)(?:\.py)?/?`", line.split("|")[1]))
    return tables


def _modules_in_the_tree() -> dict[str, set[str]]:
    want = {}
    for path in _library_files():
        if path.name in ("__init__.py", "__main__.py"):
            continue
        rel = path.relative_to(ROOT)
        folder = "gnnprep/" + ("/".join(rel.parts[1:2]) + "/" if len(rel.parts) > 2 else "")
        want.setdefault(folder, set()).add(rel.parts[2] if len(rel.parts) > 3 else path.stem)
    want["gnnprep/"] |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    return want


def table_differences(tables: dict[str, set[str]], want: dict[str, set[str]]) -> list[str]:
    """Every package without a table, table without a package, module without a row, row without a
    module."""
    out = [f"{f}: no table" for f in sorted(set(want) - set(tables))]
    out += [f"{f}: a table for no package" for f in sorted(set(tables) - set(want))]
    for f in sorted(set(want) & set(tables)):
        out += [f"{f}{m}: not listed" for m in sorted(want[f] - tables[f])]
        out += [f"{f}{m}: listed but not in the tree" for m in sorted(tables[f] - want[f])]
    return out


def test_the_docs_list_every_module():
    """docs/internals.md's "Where things live" has a row for every module of the tree and no other."""
    bad = table_differences(_listed_modules(MODULE_TABLES.read_text()), _modules_in_the_tree())
    assert bad == [], f"{MODULE_TABLES.relative_to(ROOT)}: " + "; ".join(bad)


def test_the_module_table_check_fails_on_a_missing_row():
    text = MODULE_TABLES.read_text()
    want = _modules_in_the_tree()
    assert table_differences(_listed_modules(text.replace("| `ranks` |", "| `rank_s` |")), want) == [
        "gnnprep/cli/ranks: not listed", "gnnprep/cli/rank_s: listed but not in the tree"]
    assert "gnnprep/hag/: no table" in table_differences(
        _listed_modules(text.replace("### `gnnprep/hag/`", "### hag")), want)


def test_the_code_passes_ruff():
    """The ruff configuration in pyproject.toml holds over the repository, so a ``# noqa`` marks a
    decision (each one says why), not noise."""
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", str(ROOT)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_public_names_the_readme_documented_still_import():
    """Entry points documented before the stage packages keep working for one release: the old flat
    module paths import (with a DeprecationWarning) as the same module objects."""
    import importlib
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = {name: importlib.import_module(f"gnnprep.{name}") for name in
               ("tune", "features", "memory", "store", "meta", "udf", "hoploop", "trainconfig", "sources.base")}
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert old["tune"].tune is importlib.import_module("gnnprep.train.tune").tune
    assert old["features"] is importlib.import_module("gnnprep.precompute.features")
    assert old["memory"].empty_pages is importlib.import_module("gnnprep.core.memory").empty_pages
    import gnnprep.hag
    import gnnprep.hdg
    import gnnprep.precompute
    import gnnprep.train

    assert callable(gnnprep.train.load_model) and callable(gnnprep.precompute.precompute)
    assert callable(gnnprep.hdg.aggregate) and callable(gnnprep.hag.build) and callable(gnnprep.hag.load_for)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert callable(importlib.import_module("gnnprep.propagate").precompute)


def test_configs_and_packages_import_without_numba_or_torch():
    """Startup stays cheap: the stage packages and the configs the command line builds its options
    from import neither numba nor torch (lazy package exports)."""
    code = ("import sys, gnnprep, gnnprep.core, gnnprep.sparse, gnnprep.graph, gnnprep.hag, gnnprep.hdg, "
            "gnnprep.precompute, gnnprep.train, gnnprep.precompute.config, gnnprep.train.config, "
            "gnnprep.train.tune, gnnprep.hdg.select, gnnprep.cli; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'torch')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
