"""The progress callback every long-running library function takes: ``progress(stage, done, total)``.

The library never prints; the CLI passes a callback that draws bars on stderr (``cli/common.py``).
"""

from __future__ import annotations

from typing import Callable

Progress = Callable[[str, int, "int | None"], None]


def no_progress(stage: str, done: int, total: int | None) -> None:
    """The default callback: report nothing."""
