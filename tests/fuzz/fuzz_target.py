"""What a fuzz target is (:mod:`tests.fuzz.targets`, :mod:`tests.fuzz.surfaces`): seed files, an
optional field-level mutator, a ``run`` that feeds one input through a public entry point, and
the typed errors it may raise; input ``index`` of a run with ``seed`` is a pure function of both
(:meth:`Target.generate`). Also where the seed fixtures live and the scratch files that inputs
are written to for loaders that read paths.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fuzz.mutate import mutate_bytes, rng_for

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mindspore"
STRUCTURED_SHARE = 0.4  # of inputs made by field-level edits (the rest: byte-level edits)


@dataclass
class Seed:
    name: str
    data: bytes
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Target:
    name: str
    seeds: list[Seed]
    run: Callable[[bytes, dict[str, Any]], str | None]  # a str names the outcome (else "ok")
    expected: tuple[type[BaseException], ...]
    structured: Callable[[bytes, random.Random], bytes | None] | None = None
    # Loaders: an input that raises the peak RSS by tens of MB had a field size an allocation.
    # Targets that run the model leave it off: the graph's own attributes size the work there,
    # and only the address-space cap (a failed allocation must be a typed error) applies.
    peak_check: bool = True

    def generate(self, seed: int, index: int) -> tuple[Seed, bytes]:
        """Input ``index`` of a run with ``seed``: a seed file and its mutation."""
        rng = rng_for(seed, index)
        chosen = rng.choice(self.seeds)
        data = None
        if self.structured is not None and rng.random() < STRUCTURED_SHARE:
            data = self.structured(chosen.data, rng)
            if data is not None and rng.random() < 0.25:
                data = mutate_bytes(data, rng, [s.data for s in self.seeds], max_edits=2)
        if data is None:
            data = mutate_bytes(chosen.data, rng, [s.data for s in self.seeds])
        return chosen, data


class Scratch:
    """One file per worker process that each input is written to (converters read paths)."""

    directory: Path | None = None

    @classmethod
    def path(cls, name: str) -> Path:
        if cls.directory is None:
            import tempfile

            cls.directory = Path(tempfile.mkdtemp(prefix="lite-fuzz-"))
        return cls.directory / name
