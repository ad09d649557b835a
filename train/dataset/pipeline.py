"""Dataset pipelines: sources of rows, then ``map``, ``shuffle``, ``batch`` (``mindspore.dataset``).

A row is a tuple of numpy arrays, one per column. Every operation returns a new dataset;
iteration is lazy. Shuffling is seeded (``train.set_seed`` or an explicit ``seed``) and draws a
new order each epoch, so a seeded run is reproducible bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from train.errors import DatasetError
from train.random import generator

Row = tuple[np.ndarray, ...]


class Dataset:
    """Base: subclasses implement ``_rows()`` and ``get_dataset_size()``."""

    column_names: list[str]

    def _rows(self) -> Iterator[Row]:
        raise NotImplementedError

    def get_dataset_size(self) -> int:
        raise NotImplementedError

    def __len__(self) -> int:
        return self.get_dataset_size()

    def __iter__(self) -> Iterator[Row]:
        return self._rows()

    def create_tuple_iterator(self, num_epochs: int = 1, output_numpy: bool = True) -> Iterator[Row]:
        for _ in range(max(num_epochs, 1)):
            yield from self._rows()

    def create_dict_iterator(
        self, num_epochs: int = 1, output_numpy: bool = True
    ) -> Iterator[dict[str, np.ndarray]]:
        for row in self.create_tuple_iterator(num_epochs):
            yield dict(zip(self.column_names, row))

    def get_col_names(self) -> list[str]:
        return list(self.column_names)

    # --- operations -------------------------------------------------------------------
    def map(
        self, operations: Callable | Sequence[Callable], input_columns: str | Sequence[str] | None = None
    ) -> Dataset:
        """Apply ``operations`` in order to each row's ``input_columns`` (default: the first column)."""
        return MapDataset(self, operations, input_columns)

    def batch(self, batch_size: int, drop_remainder: bool = False) -> Dataset:
        return BatchDataset(self, batch_size, drop_remainder)

    def shuffle(self, buffer_size: int, seed: int | None = None) -> Dataset:
        return ShuffleDataset(self, buffer_size, seed)

    def take(self, count: int) -> Dataset:
        return TakeDataset(self, count)


class NumpySlicesDataset(Dataset):
    """Rows sliced from arrays along axis 0 (``ds.NumpySlicesDataset(data, column_names, shuffle)``)."""

    def __init__(
        self,
        data: Any,
        column_names: Sequence[str] | None = None,
        shuffle: bool = False,
        seed: int | None = None,
    ) -> None:
        if isinstance(data, dict):
            column_names = list(data)
            data = list(data.values())
        columns = [np.asarray(c) for c in (data if isinstance(data, (list, tuple)) else [data])]
        lengths = {len(c) for c in columns}
        if len(lengths) != 1:
            raise DatasetError(f"NumpySlicesDataset: columns have different lengths {sorted(lengths)}")
        self.columns = columns
        self.column_names = list(column_names or [f"column_{i}" for i in range(len(columns))])
        if len(self.column_names) != len(columns):
            raise DatasetError(f"NumpySlicesDataset: {len(columns)} columns but names {self.column_names}")
        self.shuffle_rows = shuffle
        self.rng = generator(seed)

    def get_dataset_size(self) -> int:
        return len(self.columns[0])

    def _rows(self) -> Iterator[Row]:
        order = self.rng.permutation(len(self)) if self.shuffle_rows else range(len(self))
        for i in order:
            yield tuple(c[i] for c in self.columns)


class MapDataset(Dataset):
    def __init__(
        self,
        child: Dataset,
        operations: Callable | Sequence[Callable],
        input_columns: str | Sequence[str] | None,
    ) -> None:
        self.child = child
        self.operations = [operations] if callable(operations) else list(operations)
        names = (
            [input_columns]
            if isinstance(input_columns, str)
            else list(input_columns or child.column_names[:1])
        )
        unknown = [n for n in names if n not in child.column_names]
        if unknown:
            raise DatasetError(f"map: unknown input_columns {unknown}; the columns are {child.column_names}")
        self.indices = [child.column_names.index(n) for n in names]
        self.column_names = child.column_names

    def get_dataset_size(self) -> int:
        return self.child.get_dataset_size()

    def _rows(self) -> Iterator[Row]:
        for row in self.child._rows():
            values = list(row)
            for index in self.indices:
                for operation in self.operations:
                    values[index] = operation(values[index])
            yield tuple(values)


class BatchDataset(Dataset):
    def __init__(self, child: Dataset, batch_size: int, drop_remainder: bool) -> None:
        if batch_size <= 0:
            raise DatasetError(f"batch: batch_size must be positive, got {batch_size}")
        self.child, self.batch_size, self.drop_remainder = child, batch_size, drop_remainder
        self.column_names = child.column_names

    def get_dataset_size(self) -> int:
        rows = self.child.get_dataset_size()
        return rows // self.batch_size if self.drop_remainder else -(-rows // self.batch_size)

    def _rows(self) -> Iterator[Row]:
        pending: list[Row] = []
        for row in self.child._rows():
            pending.append(row)
            if len(pending) == self.batch_size:
                yield self._stack(pending)
                pending = []
        if pending and not self.drop_remainder:
            yield self._stack(pending)

    def _stack(self, rows: list[Row]) -> Row:
        try:
            return tuple(np.stack(column) for column in zip(*rows))
        except ValueError as err:
            raise DatasetError(
                f"batch: rows of different shapes cannot be stacked ({err}); add a Resize or "
                "crop before batch"
            ) from err


class ShuffleDataset(Dataset):
    """MindSpore's buffer shuffle: keep ``buffer_size`` rows, emit a random one, refill."""

    def __init__(self, child: Dataset, buffer_size: int, seed: int | None) -> None:
        if buffer_size < 1:
            raise DatasetError(f"shuffle: buffer_size must be >= 1, got {buffer_size}")
        self.child, self.buffer_size = child, buffer_size
        self.rng = generator(seed)
        self.column_names = child.column_names

    def get_dataset_size(self) -> int:
        return self.child.get_dataset_size()

    def _rows(self) -> Iterator[Row]:
        buffer: list[Row] = []
        for row in self.child._rows():
            if len(buffer) < self.buffer_size:
                buffer.append(row)
                continue
            index = int(self.rng.integers(len(buffer)))
            yield buffer[index]
            buffer[index] = row
        order = self.rng.permutation(len(buffer))
        for index in order:
            yield buffer[index]


class TakeDataset(Dataset):
    def __init__(self, child: Dataset, count: int) -> None:
        self.child, self.count = child, count
        self.column_names = child.column_names

    def get_dataset_size(self) -> int:
        return min(self.count, self.child.get_dataset_size())

    def _rows(self) -> Iterator[Row]:
        for index, row in enumerate(self.child._rows()):
            if index >= self.count:
                return
            yield row
