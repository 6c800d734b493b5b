"""The grid of a tune: which TrainConfig fields it may set, the ``--grid`` text read into typed
values (``lr=0.2,0.05;weight-decay=1e-5,1e-4``), and values and points written back as text."""

from __future__ import annotations

import dataclasses
import functools

from gnnprep.core.errors import OptionError
from gnnprep.train.config import TrainConfig

# TrainConfig fields a tune sets itself (or that only decide where and how fast a trial runs)
NOT_TUNABLE = ("model", "seed", "runs", "memory_budget", "threads")


def _annotation(f: dataclasses.Field) -> str:
    t = f.type
    return t if isinstance(t, str) else getattr(t, "__name__", str(t))


@functools.lru_cache(maxsize=None)
def tunable_fields() -> dict[str, str]:
    """TrainConfig field name → its type's name without ``None`` (``int``, ``float``, ``str``,
    ``bool``, ``tuple``) for every field a grid or a fixed override may set."""
    out = {}
    for f in dataclasses.fields(TrainConfig):
        if f.name in NOT_TUNABLE:
            continue
        base = _annotation(f).replace("| None", "").replace("None |", "").strip()
        out[f.name] = "tuple" if base.startswith("tuple") else base
    return out


def _optional(name: str) -> bool:
    return "None" in _annotation(next(f for f in dataclasses.fields(TrainConfig) if f.name == name))


def option_name(name: str) -> str:
    """``weight_decay`` → ``weight-decay`` (the train option's name without its dashes)."""
    return name.replace("_", "-")


def parse_value(name: str, text: str):
    """One grid value of field ``name``, read as the field's type. ``auto`` is None (chosen at train
    time) for fields whose default may be None and that are not text; a tuple is ``a+b``."""
    kind, text = tunable_fields()[name], text.strip()
    if text == "auto" and _optional(name) and kind != "str":
        return None
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "bool":
            return {"true": True, "1": True, "false": False, "0": False}[text.lower()]
        if kind == "tuple":
            return tuple(text.split("+"))
        return text
    except (ValueError, KeyError):
        raise OptionError("--grid", f"{option_name(name)}={text}: expected a{'n' if kind == 'int' else ''} {kind}") from None


def _field_for(key: str) -> str:
    name = key.strip().replace("-", "_")
    if name not in tunable_fields():
        keys = ", ".join(option_name(k) for k in tunable_fields())
        raise OptionError("--grid", f"{key.strip()!r}: unknown key; expected one of {keys}")
    return name


def parse_grid(text: str) -> tuple[tuple[str, tuple], ...]:
    """``lr=0.2,0.05;weight-decay=1e-5,1e-4`` → ``(("lr", (0.2, 0.05)), ("weight_decay", (1e-5, 1e-4)))``.

    Keys are train option names (dashes or underscores) mapped to TrainConfig fields; values are read
    as the field's type. An unknown or repeated key, an empty or repeated value: OptionError."""
    entries = [e for e in str(text).split(";") if e.strip()]
    if not entries:
        raise OptionError("--grid", f"{text!r}: expected key=v1,v2;key2=v3")
    grid: dict[str, tuple] = {}
    for entry in entries:
        key, eq, values = entry.partition("=")
        if not eq or not key.strip():
            raise OptionError("--grid", f"{entry.strip()!r}: expected key=v1,v2")
        name = _field_for(key)
        if name in grid:
            raise OptionError("--grid", f"{option_name(name)}: given twice; expected each key once")
        texts = values.split(",")
        if any(not t.strip() for t in texts):
            raise OptionError("--grid", f"{option_name(name)}={values.strip()}: empty value; expected v1,v2,...")
        parsed = tuple(parse_value(name, t) for t in texts)
        if len(set(parsed)) != len(parsed):
            raise OptionError("--grid", f"{option_name(name)}={values.strip()}: a value is repeated")
        grid[name] = parsed
    return tuple(grid.items())


def format_value(v) -> str:
    if v is None:
        return "auto"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, tuple):
        return "+".join(v)
    return str(v)


def format_params(params: dict) -> str:
    return ", ".join(f"{option_name(k)}={format_value(v)}" for k, v in params.items())
