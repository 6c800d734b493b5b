"""Typed results that still read like the dicts they replaced.

Reports cross stage boundaries as frozen dataclasses (typed fields, ``to_dict`` for ``--json``).
:class:`Record` adds read-only mapping access (``report.plan["c"]``, ``"found_in" in order``), so
callers written against the earlier dict results keep working; a field declared with
``optional()`` is left out of :meth:`Record.to_dict` (and of ``in``) while it is None, the way the
dict left the key out.
"""

from __future__ import annotations

import dataclasses


def optional(default=None):
    """A field that is absent from the dict form while it is None."""
    return dataclasses.field(default=default, metadata={"omit_none": True})


class Record:
    """Mixin for frozen dataclasses: ``to_dict()`` plus read-only mapping access by field name."""

    def _present(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = v
        return out

    def to_dict(self) -> dict:
        """The fields as plain values (nested records and dataclasses as dicts)."""
        def plain(v):
            if isinstance(v, Record):
                return v.to_dict()
            if dataclasses.is_dataclass(v) and not isinstance(v, type):
                return dataclasses.asdict(v)
            return v

        return {k: plain(v) for k, v in self._present().items()}

    def __getitem__(self, key: str):
        present = self._present()
        if key not in present:
            raise KeyError(key)
        return present[key]

    def __contains__(self, key) -> bool:
        return key in self._present()

    def get(self, key: str, default=None):
        return self._present().get(key, default)

    def keys(self):
        return self._present().keys()
