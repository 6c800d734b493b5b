"""The house's structure: one package per pipeline stage, imports running one way

    core ← sparse ← graph ← {hag, hdg} ← precompute ← train ← (gnnprep.info) ← cli

(a later stage may import an earlier one, never the reverse, counting imports inside functions and
modules loaded by name; hag and hdg are siblings and import neither each other), no import circle
between modules, no module loaded by a name the test cannot read, every artifact format registering
its reader and describer where it is defined (and ``gnnprep.info`` importing each such module), no
function in ``gnnprep/precompute/`` over 100 lines, no module reaching into another module's
``_private`` names, each artifact layout opened and spelled only by its owner module, a small top level,
and docs/internals.md's "Where things live" listing every module.
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


LOADERS = ("import_module", "__import__")   # importlib.import_module(name), import_module(name), __import__(name)


def _loader_call(node: ast.AST) -> bool:
    """Whether ``node`` calls ``importlib.import_module``, a bare ``import_module`` or ``__import__``."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id in LOADERS) or (isinstance(f, ast.Attribute) and f.attr == "import_module")


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def imported_modules(tree: ast.AST, module: str, is_package: bool):
    """(line, imported module, imported name or None) for every import, absolute or relative,
    at any depth (inside functions too), and every module loaded by a literal name
    (``importlib.import_module("gnnprep.x")``, relative with a literal ``package``, ``__import__``)."""
    for node in ast.walk(tree):
        if _loader_call(node) and node.args and _literal(node.args[0]) is not None:
            name = _literal(node.args[0])
            if name.startswith("."):
                package = _literal(node.args[1]) if len(node.args) > 1 else next(
                    (_literal(k.value) for k in node.keywords if k.arg == "package"), None)
                if package is None:
                    continue
                depth = len(name) - len(name.lstrip("."))
                base = package.split(".")[:len(package.split(".")) - depth + 1]
                name = ".".join(base + ([name.lstrip(".")] if name.lstrip(".") else []))
            yield node.lineno, name, None
        elif isinstance(node, ast.Import):
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


# -- no import circle ----------------------------------------------------------------------------------
def lazy_exports(tree: ast.AST, package: str) -> dict[str, str]:
    """A package ``__init__``'s lazy export table (``exports(__name__, {name: submodule})``, as
    :mod:`gnnprep.core.lazy` reads it): public name -> the module that defines it."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "exports" \
                and len(node.args) == 2 and isinstance(node.args[1], ast.Dict):
            for k, v in zip(node.args[1].keys, node.args[1].values):
                if _literal(k) is not None and _literal(v) is not None:
                    out[_literal(k)] = f"{package}.{_literal(v)}"
    return out


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, dict[str, int]]:
    """module -> {gnnprep module it imports: first line}, for ``sources`` (dotted module name ->
    (source, is_package)). Every import counts, at any depth (inside functions, under
    ``TYPE_CHECKING``), relative ones and modules loaded by a literal name included.

    An edge goes to the module named, never to the packages above it: ``import gnnprep.a.b`` runs
    ``gnnprep/a/__init__.py`` first, but Python finishes (or is already running) a package's
    ``__init__`` before its submodules whatever they import, and counting that implicit step would
    make every package whose ``__init__`` imports its own members (``graph.sources``, ``train.tune``)
    a circle with each of them. ``from gnnprep.a import name`` goes to ``gnnprep.a.name`` when that
    is a module, to the module a lazy export table (:func:`lazy_exports`) names for it, else to the
    package ``gnnprep.a`` itself (a name its ``__init__`` defines or imports eagerly, whose imports
    then count as the package's own). A lazy table gives its package no edges: its modules are
    imported on first use of a name, after the ``__init__`` ran, so ``gnnprep.hag`` exporting
    ``build`` from ``hag.search``, which imports ``gnnprep.hag.structure``, is no circle."""
    modules = set(sources)
    lazy = {m: lazy_exports(ast.parse(src), m) for m, (src, is_pkg) in sources.items() if is_pkg}

    def resolve(target: str) -> str | None:
        parts = target.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        return ".".join(parts) or None

    graph: dict[str, dict[str, int]] = {}
    for module, (source, is_package) in sources.items():
        edges = graph.setdefault(module, {})
        for line, target, name in imported_modules(ast.parse(source), module, is_package):
            if target != "gnnprep" and not target.startswith("gnnprep."):
                continue
            if name is not None and f"{target}.{name}" in modules:
                to = f"{target}.{name}"
            elif name is not None and name in lazy.get(target, {}):
                to = resolve(lazy[target][name])
            else:
                to = resolve(target)
            if to is not None and to != module:
                edges.setdefault(to, line)
    return graph


def import_circles(sources: dict[str, tuple[str, bool]]) -> list[str]:
    """Every group of modules that import each other round (a strongly connected component of
    :func:`import_graph` with more than one module), as one of its shortest circles with the line of
    each import: ``a:3 -> b:10 -> a``."""
    graph = import_graph(sources)
    index, low, on_stack, stack, groups = {}, {}, set(), [], []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for group in sorted(groups, key=min):
        start = min(group)
        previous, frontier = {start: None}, [start]
        while frontier and start not in [w for v in frontier for w in graph[v]]:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w in group and w not in previous:
                        previous[w] = v
                        nxt.append(w)
            frontier = nxt
        last = next(v for v in frontier if start in graph[v])
        path = [last]
        while previous[path[-1]] is not None:
            path.append(previous[path[-1]])
        path.reverse()
        steps = [f"{v}:{graph[v][w]}" for v, w in zip(path, path[1:] + [start])]
        out.append(" -> ".join(steps + [start]) + (f" (and {len(group) - len(path)} more modules in the circle's group: "
                                                   f"{', '.join(sorted(group - set(path)))})" if len(group) > len(path) else ""))
    return out


def _library_sources() -> dict[str, tuple[str, bool]]:
    return {module_name(p): (p.read_text(), p.name == "__init__.py") for p in _library_files()}


def test_no_import_circle():
    """No module imports (directly or through others, at any depth, by name included) a module that
    imports it back: each circle is listed with the line of every import in it."""
    assert import_circles(_library_sources()) == []


# -- modules loaded by a computed name -------------------------------------------------------------------
# the two places that load gnnprep modules by a computed name, each from a table the test reads: the lazy
# package exports (the tables import_graph resolves) and the one-release aliases of moved modules (old
# names only; the library itself never imports an old name, which test_imports_run_one_way refuses)
COMPUTED_LOADS_ALLOWED = {"gnnprep.core.lazy", "gnnprep"}


def computed_loads(source: str, module: str) -> list[str]:
    """Modules ``module`` loads by a name that is no string literal (an import the import graph and
    the direction rule cannot see)."""
    return [f"{module}:{node.lineno}: loads a module by a computed name ({ast.unparse(node)})"
            for node in ast.walk(ast.parse(source))
            if _loader_call(node) and not (node.args and _literal(node.args[0]) is not None)]


def test_no_module_loads_a_module_by_a_computed_name():
    bad = []
    for path in _library_files():
        if module_name(path) not in COMPUTED_LOADS_ALLOWED:
            bad += computed_loads(path.read_text(), module_name(path))
    assert bad == []


# -- each format registers its reader and describer where it is defined ----------------------------------
def _registered_names(tree: ast.AST) -> dict[str, set[str]]:
    """"reader"/"describer" -> the names a module passes to ``register_format``."""
    out = {"reader": set(), "describer": set()}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "register_format":
            args = dict(zip(("format", "reader", "describer"), node.args)) | {k.arg: k.value for k in node.keywords}
            for role in out:
                if isinstance(args.get(role), ast.Name):
                    out[role].add(args[role].id)
    return out


def registration_gaps(sources: dict[str, str], info: str = "gnnprep.info") -> list[str]:
    """For ``sources`` (module -> source): every reader class that sets its own ``FORMAT`` and is not
    registered (with a describer) by its module, and every registering module that ``info`` (the
    dispatcher behind ``gnnprep.open`` and ``gnnprep info``) does not import by a plain import."""
    out, registering = [], set()
    for module, source in sources.items():
        tree = ast.parse(source)
        registered = _registered_names(tree)
        if registered["reader"] or registered["describer"]:
            registering.add(module)
        for cls in tree.body:
            if not isinstance(cls, ast.ClassDef):
                continue
            sets_format = any(isinstance(s, ast.Assign) and any(getattr(t, "id", None) == "FORMAT" for t in s.targets)
                              and _literal(s.value) != "" for s in cls.body)
            if sets_format and cls.name not in registered["reader"]:
                out.append(f"{module}: reader {cls.name} sets FORMAT but is not registered (register_format)")
            if sets_format and not registered["describer"]:
                out.append(f"{module}: defines the reader {cls.name} but registers no describer")
    imported = {target for _, target, name in imported_modules(ast.parse(sources.get(info, "")), info, False)
                if name is None}
    out += [f"{info}: does not import {m}, which registers a format" for m in sorted(registering - imported)]
    return out


def test_every_format_registers_its_reader_and_describer():
    """Item 6 of issue 31: each artifact format registers its reader and describer where it is
    defined, gnnprep.info imports those modules by plain imports (no table of module names), and
    after that every format in core.artifact.FORMATS has both, the reader's FORMAT being its own."""
    sources = {m: src for m, (src, _) in _library_sources().items()}
    assert registration_gaps(sources) == []
    assert "import_module" not in sources["gnnprep.info"] and "importlib" not in sources["gnnprep.info"]
    import gnnprep.info  # noqa: F401 - registers every format
    from gnnprep.core.artifact import FORMATS, describer_of, reader_of
    from gnnprep.train.loader import Features

    missing = [f for f in FORMATS if reader_of(f) is None or describer_of(f) is None or reader_of(f).FORMAT != f]
    assert missing == []
    assert reader_of("gnnprep.features") is Features   # the train stage's reader, over the precompute stage's


# -- short functions in precompute ------------------------------------------------------------------------
LONGEST_FUNCTION = 100
SHORT_FUNCTIONS_IN = ("precompute",)


def long_functions(source: str, module: str, limit: int = LONGEST_FUNCTION) -> list[str]:
    """Functions and methods of ``module`` longer than ``limit`` lines, from ``def`` to their last
    line (decorators left out; a nested function counts on its own and in its parent)."""
    out = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = child.end_lineno - child.lineno + 1
                if lines > limit:
                    out.append(f"{module}.{prefix}{child.name}:{child.lineno}: {lines} lines (at most {limit})")
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def test_no_long_function_in_precompute():
    bad = []
    for stage in SHORT_FUNCTIONS_IN:
        for path in sorted((PACKAGE / stage).rglob("*.py")):
            bad += long_functions(path.read_text(), module_name(path))
    assert bad == []


def test_the_new_rules_fail_on_a_violation():
    two = {"gnnprep.hag.a": ("from gnnprep.hag.b import f\n", False),
           "gnnprep.hag.b": ("from gnnprep.hag import a\n", False)}
    assert import_circles(two) == ["gnnprep.hag.a:1 -> gnnprep.hag.b:1 -> gnnprep.hag.a"]
    in_function = {"gnnprep.precompute.backends": ("import numpy as np\n\ndef f():\n    from .hag_torch import g\n", False),
                   "gnnprep.precompute.hag_torch": ("from gnnprep.precompute.backends import f\n", False)}
    assert import_circles(in_function) == [
        "gnnprep.precompute.backends:4 -> gnnprep.precompute.hag_torch:1 -> gnnprep.precompute.backends"]
    by_name = {"gnnprep.info": ("import importlib\n\ndef f():\n    return importlib.import_module('gnnprep.graph.store')\n",
                                False),
               "gnnprep.graph.store": ("def g():\n    from gnnprep.core import x\n", False),
               "gnnprep.core.x": ("__import__('gnnprep.info')\n", False),
               "gnnprep.core": ("", True)}
    assert import_circles(by_name) == ["gnnprep.core.x:1 -> gnnprep.info:4 -> gnnprep.graph.store:2 -> gnnprep.core.x"]
    assert direction_violations("import importlib\nimportlib.import_module('gnnprep.train.loader')\n", "gnnprep.info") == []
    assert direction_violations("from importlib import import_module\nimport_module('gnnprep.cli')\n", "gnnprep.info")
    assert direction_violations("import importlib\nimportlib.import_module('..cli', 'gnnprep.train')\n",
                                "gnnprep.train.loader")
    # a lazy export table is no circle: the package's modules import their package's names ...
    lazy = {"gnnprep.hag": ("from gnnprep.core.lazy import exports\n__getattr__, __dir__ = exports(__name__, "
                            "{'build': 'search', 'Hag': 'structure'})\n", True),
            "gnnprep.hag.search": ("import gnnprep.hag.structure\n", False),
            "gnnprep.hag.structure": ("from gnnprep.hag import file\n", False),
            "gnnprep.hag.file": ("from gnnprep.core.artifact import Artifact\n", False)}
    assert import_circles(lazy) == []
    # ... but one name through it that closes a circle is one
    lazy["gnnprep.hag.file"] = ("def f():\n    from gnnprep.hag import build\n", False)
    assert import_circles(lazy) == [
        "gnnprep.hag.file:2 -> gnnprep.hag.search:1 -> gnnprep.hag.structure:1 -> gnnprep.hag.file"]
    # loads the test cannot see: the dispatch by a table of module names that registration replaced
    old_info = "import importlib\nDESCRIBERS = {}\ndef d(fmt, path):\n    return importlib.import_module(DESCRIBERS[fmt]).describe(path)\n"
    assert computed_loads(old_info, "gnnprep.info") == [
        "gnnprep.info:4: loads a module by a computed name (importlib.import_module(DESCRIBERS[fmt]))"]
    assert computed_loads("import importlib\nimportlib.import_module('gnnprep.graph.store')\n", "gnnprep.info") == []
    # a reader that does not register, a registration without a describer, a dispatcher missing a module
    store = "class GraphStore(Artifact):\n    FORMAT = FORMAT\ndef describe(path):\n    return {}\n"
    info = "import gnnprep.graph.store\n"
    assert registration_gaps({"gnnprep.graph.store": store, "gnnprep.info": info}) == [
        "gnnprep.graph.store: reader GraphStore sets FORMAT but is not registered (register_format)",
        "gnnprep.graph.store: defines the reader GraphStore but registers no describer"]
    registered = store + "register_format(FORMAT, reader=GraphStore, describer=describe)\n"
    assert registration_gaps({"gnnprep.graph.store": registered, "gnnprep.info": info}) == []
    assert registration_gaps({"gnnprep.graph.store": store + "register_format(FORMAT, GraphStore)\n",
                              "gnnprep.info": info}) == [
        "gnnprep.graph.store: defines the reader GraphStore but registers no describer"]
    assert registration_gaps({"gnnprep.graph.store": registered, "gnnprep.info": "import json\n"}) == [
        "gnnprep.info: does not import gnnprep.graph.store, which registers a format"]
    assert registration_gaps({"gnnprep.core.artifact": "class Artifact:\n    FORMAT = ''\n", "gnnprep.info": ""}) == []
    # a 101-line function (a method, a nested one), not a 100-line one nor its decorators
    body = "    x = 1\n" * 99 + "    return x\n"
    assert long_functions("def f():\n" + body, "gnnprep.precompute.run") == [
        "gnnprep.precompute.run.f:1: 101 lines (at most 100)"]
    assert long_functions("class A:\n    def m(self):\n" + body.replace("    ", "        "), "gnnprep.precompute.run") == [
        "gnnprep.precompute.run.A.m:2: 101 lines (at most 100)"]
    assert long_functions("def g():\n    def h():\n" + body.replace("    ", "        "), "m") == [
        "m.g:1: 102 lines (at most 100)", "m.g.h:2: 101 lines (at most 100)"]
    assert long_functions("@a\n@b\ndef f():\n" + body[len("    x = 1\n"):], "gnnprep.precompute.run") == []


# -- each artifact layout has one owner module -------------------------------------------------------------
# owner module -> the top-level groups of the layouts it owns: graph.h5 (the graph store), features.h5,
# hag.h5, hdg.h5, the ordered CSR copy (its root ``order``); core.artifact opens any artifact, naming no path
LAYOUT_OWNERS = {
    "gnnprep.core.artifact": frozenset(),
    "gnnprep.core.h5file": frozenset(),   # opens the files the owners write; addresses nothing in them
    "gnnprep.graph.store": frozenset({"adj", "nodes", "splits", "order"}),
    "gnnprep.precompute.features": frozenset({"hops", "channels", "splits"}),
    "gnnprep.hag.file": frozenset({"agg", "adj"}),
    "gnnprep.hdg.file": frozenset({"levels"}),
    "gnnprep.precompute.ordered": frozenset({"order"}),
}
ARTIFACT_PATH = re.compile(r"^/?(adj|nodes|splits|order|hops|channels|agg|levels)(/|$)")
# calls whose argument at this position is always an HDF5 path (h5py's creators, core.artifact's reader)
PATH_ARGUMENT = {"create_dataset": 0, "create_group": 0, "require_dataset": 0, "require_group": 0,
                 "dataset_or_none": 1, "VirtualSource": 1}
HANDLE_ATTRIBUTE = "f"   # Artifact's open file (store.f, self.f) and the house's name for an h5py handle


def _string_parts(node: ast.AST) -> list[str]:
    """The literal text of a string constant, or each literal part of an f-string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    return []


def _artifact_group(node: ast.AST, bare: bool) -> str | None:
    """The artifact group a string or f-string names (``adj`` for ``"adj/indptr"``, ``channels`` for
    ``f"channels/{c}/{k}"``), or None; a bare group name (``"splits"``, no slash) only when ``bare``."""
    for part in _string_parts(node):
        m = ARTIFACT_PATH.match(part)
        if m and (bare or m.group(2) == "/" or part.startswith("/")):
            return m.group(1)
    return None


def _handle_names(scope: ast.AST) -> set[str]:
    """Names that hold an HDF5 file or group in ``scope`` (a function, or the module's top level):
    parameters named ``f`` or annotated with an h5py type, and ``with ... as name`` targets."""
    names = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = scope.args
        names |= {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs
                  if p.arg == HANDLE_ATTRIBUTE or (p.annotation is not None and "h5py" in ast.unparse(p.annotation))}
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, (ast.With, ast.AsyncWith)):
            names |= {i.optional_vars.id for i in node.items if isinstance(i.optional_vars, ast.Name)}
        todo += ast.iter_child_nodes(node)
    return names


def layout_violations(source: str, module: str) -> list[str]:
    """Places in ``module`` that open an HDF5 file or address an artifact's HDF5 object by a path of a
    layout the module does not own (:data:`LAYOUT_OWNERS`).

    Opening: a call of ``h5py.File`` (under any alias of h5py, or ``File`` imported from it) outside
    the owners; ``isinstance(x, h5py.File)`` and the like are no calls and pass.

    Addressing: a string, or a literal part of an f-string, that matches :data:`ARTIFACT_PATH` and
    is (1) a subscript (``f["adj/indptr"]``, ``hops[f"hops/{k}"]``), (2) the path argument of
    h5py's ``create_dataset``/``create_group``/``require_dataset``/``require_group`` (or ``name=``),
    ``h5py.VirtualSource`` or ``dataset_or_none``, (3) the argument of ``.get(...)``, (4) the left
    side of ``in``/``not in``, or (5) bound to a name: assigned at any depth, an element of a tuple
    or list a module-level constant holds or a ``for`` loop runs over. A string that is only text
    (an error message such as ``f"{path}: /adj/indptr is corrupt"``, a docstring, a call argument
    elsewhere) does not address anything and passes. A bare group name without a slash (``"splits"``,
    ``"order"``) is also a dict key in many places, so it counts only where it must be an HDF5 name:
    (2), a whole module-level constant, and (1), (3), (4) on an HDF5 handle: an attribute ``.f``, a
    parameter named ``f`` or annotated with an h5py type, or a ``with ... as name`` target of the
    enclosing function (``report["splits"]``, ``cached.get("levels", 0)`` pass)."""
    tree = ast.parse(source)
    owned = LAYOUT_OWNERS.get(module)
    h5py_names, file_names = {"h5py"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            h5py_names |= {a.asname or a.name for a in node.names if a.name == "h5py"}
        elif isinstance(node, ast.ImportFrom) and node.module == "h5py":
            file_names |= {a.asname or a.name for a in node.names if a.name == "File"}
    out = []

    def named(node: ast.AST, how: str, bare: bool) -> None:
        group = _artifact_group(node, bare)
        if group is not None and group not in (owned or ()):
            out.append(f"{module}:{node.lineno}: {how} {ast.unparse(node)} (the {group} group has another owner)")

    def check(node: ast.AST, handles: set[str], top: bool) -> None:
        def handle(x):
            return (isinstance(x, ast.Attribute) and x.attr == HANDLE_ATTRIBUTE) or (isinstance(x, ast.Name) and x.id in handles)

        if isinstance(node, ast.Call):
            fn = node.func
            opens = (isinstance(fn, ast.Attribute) and fn.attr == "File" and isinstance(fn.value, ast.Name)
                     and fn.value.id in h5py_names) or (isinstance(fn, ast.Name) and fn.id in file_names)
            if opens and owned is None:
                out.append(f"{module}:{node.lineno}: opens an HDF5 file ({ast.unparse(fn)}(...)) outside the layouts' owners")
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
            if name in PATH_ARGUMENT:
                args = node.args[PATH_ARGUMENT[name]:PATH_ARGUMENT[name] + 1] + [k.value for k in node.keywords if k.arg == "name"]
                for a in args:
                    named(a, f"{name}(...) of", True)
            elif name == "get" and node.args:
                named(node.args[0], "get(...) of", handle(fn.value))
        elif isinstance(node, ast.Subscript):
            named(node.slice, "subscript", handle(node.value))
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            named(node.left, "membership test of", handle(node.comparators[0]))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            named(node.value, "assigns", top)
            if top and isinstance(node.value, (ast.Tuple, ast.List, ast.Set)):
                for e in node.value.elts:
                    named(e, "assigns", False)
        elif isinstance(node, ast.For) and isinstance(node.iter, (ast.Tuple, ast.List, ast.Set)):
            for e in node.iter.elts:
                named(e, "loops over", False)

    def visit(node: ast.AST, handles: set[str], top: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            handles, top = handles | _handle_names(node), False
        elif isinstance(node, ast.ClassDef):
            top = False
        check(node, handles, top)
        for child in ast.iter_child_nodes(node):
            visit(child, handles, top)

    visit(tree, _handle_names(tree), True)
    return out


def test_each_artifact_layout_has_one_owner():
    """Item 1 of issue 31: only the owner of an artifact layout opens HDF5 files and spells its paths
    (graph.h5: graph.store; features.h5: precompute.features; hag.h5: hag.file; hdg.h5: hdg.file; the
    ordered CSR copy: precompute.ordered; any artifact, generically: core.artifact); every other
    module goes through their names and methods (see :func:`layout_violations` for what counts)."""
    bad = []
    for path in _library_files():
        bad += layout_violations(path.read_text(), module_name(path))
    assert bad == []


def test_the_layout_rule_fails_on_a_violation():
    planted = 'import h5py\n\ndef read(p):\n    with h5py.File(p) as f:\n        return f["hops/3"][:]\n'
    assert layout_violations(planted, "gnnprep.train.batches") == [
        "gnnprep.train.batches:4: opens an HDF5 file (h5py.File(...)) outside the layouts' owners",
        "gnnprep.train.batches:5: subscript 'hops/3' (the hops group has another owner)"]
    assert layout_violations(planted, "gnnprep.precompute.features") == []
    # an owner spells only its own layout's paths; core.artifact opens files but names no path
    assert layout_violations(planted, "gnnprep.graph.store") == [
        "gnnprep.graph.store:5: subscript 'hops/3' (the hops group has another owner)"]
    assert layout_violations(planted.replace('f["hops/3"]', 'f["x"]'), "gnnprep.core.artifact") == []
    channel = 'class Loop:\n    def write(self, c, k, x):\n        self.f[f"channels/{c}/{k}"][:] = x\n'
    assert layout_violations(channel, "gnnprep.precompute.hop_loop") == [
        "gnnprep.precompute.hop_loop:3: subscript f'channels/{c}/{k}' (the channels group has another owner)"]
    message = 'def check(path, ok):\n    if not ok:\n        raise GnnprepError(f"{path}: /adj/indptr is corrupt")\n'
    assert layout_violations(message, "gnnprep.graph.sources.graphstore") == []
    # the other ways to open or address, each once
    assert layout_violations("from h5py import File as H5\nH5('x.h5')\n", "gnnprep.train.loader") == [
        "gnnprep.train.loader:2: opens an HDF5 file (H5(...)) outside the layouts' owners"]
    assert layout_violations("import h5py as h\n\ndef f(x):\n    return isinstance(x, h.File)\n", "gnnprep.info") == []
    ways = ('ORDER = "order"\nNAMES = ("adj/indptr", "x")\n\ndef g(f, h: h5py.Group, grp, d):\n'
            '    name = f"levels/{d}"\n    a = f.get("splits")\n    b = "nodes/labels" in grp\n    c = "agg" in h\n'
            '    grp.create_group("channels")\n    for p in ["adj/indices"]:\n        pass\n'
            '    return dataset_or_none(grp, "nodes", "p"), d["splits"], d.get("levels", 0), "order" in d\n')
    assert [v.split(": ", 1)[1] for v in layout_violations(ways, "gnnprep.graph.order")] == [
        "assigns 'order' (the order group has another owner)",
        "assigns 'adj/indptr' (the adj group has another owner)",
        "assigns f'levels/{d}' (the levels group has another owner)",
        "get(...) of 'splits' (the splits group has another owner)",
        "membership test of 'nodes/labels' (the nodes group has another owner)",
        "membership test of 'agg' (the agg group has another owner)",
        "create_group(...) of 'channels' (the channels group has another owner)",
        "loops over 'adj/indices' (the adj group has another owner)",
        "dataset_or_none(...) of 'nodes' (the nodes group has another owner)"]


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
            current.update(re.findall(r"`([a-z][a-z0-9_]*)(?:\.py)?/?`", line.split("|")[1]))
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
