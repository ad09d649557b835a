"""The bounded least-recently-used cache behind the numpy engine's per-shape plans.

Fused steps and kernels work out what they can once per input shape (a plan, a bias broadcast
to the product's shape, a pool's geometry) and look it up on later calls. A server sees many
shapes: the sequence lengths of a text model, the batch sizes of dynamic batching. Emptying a
full cache made every call replan once the shapes seen outnumbered its bound; this cache drops
the entry used longest ago instead, and bounds both its entries and the bytes they hold (an
entry that holds an operand materialized at the input's shape counts its size). Callers that
can do without those bytes ask :meth:`PlanCache.affords` first and keep a broadcast operand
past the budget: least-recently-used eviction in a cycle through more shapes than fit would
evict every entry before its next use.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

Value = TypeVar("Value")

# Per cache: input shapes planned (a server cycling through a few dozen sequence lengths or batch
# sizes stays planned) and the bytes of arrays its entries hold.
SHAPES_KEPT = 64
BYTES_KEPT = 1 << 20


class PlanCache(Generic[Value]):
    """At most ``entries`` values, holding at most ``budget`` bytes as their ``put`` declared,
    the least recently used dropped first. The newest entry always stays, even one larger than
    the budget: the call that made it is likely to be repeated."""

    def __init__(self, entries: int = SHAPES_KEPT, budget: int = BYTES_KEPT) -> None:
        if entries < 1 or budget < 0:
            raise ValueError(f"a PlanCache keeps at least one entry and a budget of 0 bytes or more; "
                             f"got entries={entries}, budget={budget}")
        self.entries = entries
        self.budget = budget
        self.nbytes = 0
        self._values: OrderedDict[Hashable, tuple[Value, int]] = OrderedDict()

    def get(self, key: Hashable, default: Value | None = None) -> Value | None:
        """The value kept for ``key`` (now the most recently used), or ``default``."""
        values = self._values
        try:
            values.move_to_end(key)  # the hit's cost: 0.2 µs (a dict's get is 0.05)
            return values[key][0]
        except KeyError:  # absent, or dropped meanwhile by another thread's put
            return default

    def put(self, key: Hashable, value: Value, nbytes: int = 0) -> Value:
        """Keep ``value`` for ``key`` (``nbytes``: what the value holds that nothing else does,
        such as an array made for it) and return it, dropping the least recently used entries
        past the bounds."""
        self.pop(key)
        self._values[key] = (value, nbytes)
        self.nbytes += nbytes
        while len(self._values) > 1 and (len(self._values) > self.entries or self.nbytes > self.budget):
            try:
                _, (_, dropped) = self._values.popitem(last=False)
            except KeyError:  # another thread emptied it meanwhile
                break
            self.nbytes -= dropped
        return value

    def affords(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more stay within the budget as the cache stands, or it holds none
        (one entry may exceed it): a caller that can do without them (a broadcast operand
        instead of one materialized at full shape) keeps its entry without evicting others.
        Past the budget, a cycle through more shapes than fit would evict each entry before
        its next use."""
        return not self.nbytes or self.nbytes + nbytes <= self.budget

    def pop(self, key: Hashable) -> None:
        """Drop the entry of ``key``, if any."""
        entry = self._values.pop(key, None)
        if entry is not None:
            self.nbytes -= entry[1]

    def keys(self) -> list[Hashable]:
        """The keys, least recently used first (reading them marks none as used)."""
        return list(self._values)

    def values(self) -> list[Value]:
        return [value for value, _ in self._values.values()]

    def items(self) -> list[tuple[Hashable, Value]]:
        return [(key, value) for key, (value, _) in self._values.items()]

    def __getitem__(self, key: Hashable) -> Value:
        """The value kept for ``key`` (KeyError if none), not marked as used."""
        return self._values[key][0]

    def clear(self) -> None:
        self._values.clear()
        self.nbytes = 0

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._values
