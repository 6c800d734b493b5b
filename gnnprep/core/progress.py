"""The callbacks long-running library functions take: ``progress(stage, done, total)`` and
``warn(message)``.

The library never prints; the CLI passes callbacks that draw bars and print warnings on stderr
(``cli/common.py``).
"""

from __future__ import annotations

from typing import Callable

Progress = Callable[[str, int, "int | None"], None]
Warn = Callable[[str], None]


def no_progress(stage: str, done: int, total: int | None) -> None:
    """The default callback: report nothing."""


def no_warning(message: str) -> None:
    """The default ``warn`` callback: say nothing (a report usually carries the warnings too)."""
