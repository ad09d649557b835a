"""Files over 2 GB: 64-bit offsets in the data section, memory-mapped reads."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from lite.format import GraphBuilder, load, save

SIZE = 2_200_000_000  # past 2**31 bytes


@pytest.mark.slow
def test_model_larger_than_2_gb_round_trips(tmp_path):
    if shutil.disk_usage(tmp_path).free < 3 * SIZE:
        pytest.skip("needs about 7 GB of free disk")
    b = GraphBuilder("big")
    x = b.input("x", np.uint8, [4])
    big = np.zeros(SIZE, np.uint8)
    big[-4:] = [1, 2, 3, 4]  # the last bytes lie beyond 2**31
    b.constant("padding", big)
    b.constant("tail", np.arange(4, dtype=np.uint8) + 7)
    y = b.node("Add", [x, "tail"], outputs=["y"])
    b.output(y, np.uint8, [4])
    path = tmp_path / "big.lite"
    save(b.build(), path)
    del big
    assert path.stat().st_size > 2**31
    model = load(path)
    padding, tail = model.main.tensors[1].data, model.main.tensors[2].data
    assert padding.shape == (SIZE,) and not padding.flags.owndata
    assert padding[-4:].tolist() == [1, 2, 3, 4]
    assert tail.tolist() == [7, 8, 9, 10]
