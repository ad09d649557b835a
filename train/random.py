"""One seeded source of randomness (``mindspore.set_seed``): initializers, dropout, datasets.

Every consumer draws its own :class:`numpy.random.Generator` from :func:`generator`, spawned
from the global seed sequence, so a run seeded with :func:`set_seed` is reproducible bit for
bit however many consumers exist, as long as they are created in the same order.
"""

from __future__ import annotations

import numpy as np


class _Seed:
    sequence = np.random.SeedSequence()


def set_seed(seed: int) -> None:
    """Seed everything created afterwards (weights, dropout masks, shuffles, random transforms)."""
    _Seed.sequence = np.random.SeedSequence(seed)


def generator(seed: int | None = None) -> np.random.Generator:
    """A new generator: from ``seed`` when given, else the next child of the global sequence."""
    if seed is not None:
        return np.random.default_rng(seed)
    return np.random.default_rng(_Seed.sequence.spawn(1)[0])
