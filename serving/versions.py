"""Version numbers: the names of a model's version folders and the ``model_version`` of requests.

A version is a positive integer written in 1 to 18 ASCII digits (so it fits an int64, as Triton's
versions do). ``str.isdigit`` and ``int`` are not that test: they also take other scripts' digits
(``'१'``, ``'１'`` would be version 1) and ``isdigit`` takes superscripts (``'²'``) that ``int``
then refuses; ``int`` also refuses strings of more than 4,300 digits.
"""

from __future__ import annotations

import re

MAX_DIGITS = 18
_VERSION = re.compile(f"[0-9]{{1,{MAX_DIGITS}}}")  # [0-9], not \d: \d matches every script's digits


def parse_version(text: str) -> int | None:
    """The number ``text`` writes, or None when it is not 1 to 18 ASCII digits."""
    return int(text) if _VERSION.fullmatch(text) else None


def shown(text: str) -> str:
    """``text`` quoted for a message, cut short when long."""
    if len(text) <= 40:
        return repr(text)
    return f"{text[:40]!r}... ({len(text)} characters)"
