"""lite.op_registry: the one table behind the numpy kernels and the torch lowerings."""

from __future__ import annotations

import pytest

from lite.ops.registry import KernelRegistry


def _relu(X):
    return X


def test_the_newest_version_not_above_the_opset_is_selected():
    kernels = KernelRegistry()
    kernels.register("Relu", since=6)(_relu)
    kernels.register("Relu", since=14)(_relu)
    assert kernels.select("Relu", "", 5) is None
    assert kernels.select("Relu", "ai.onnx", 13).since_version == 6
    assert kernels.select("Relu", "", 21).since_version == 14
    assert kernels.versions("Relu", "ai.onnx") == [6, 14]
    assert ("ai.onnx", "Relu") in kernels and kernels.op_types() == ["Relu"]


def test_registering_a_version_twice_is_an_error():
    kernels = KernelRegistry()
    kernels.register("Relu", since=14)(_relu)
    with pytest.raises(ValueError, match=r"kernel ai.onnx::Relu since opset 14 is registered twice"):
        kernels.register("Relu", since=14, domain="ai.onnx")(_relu)


def test_torch_lowerings_use_the_same_table():
    pytest.importorskip("torch")
    from lite.engines.torch.ops.registry import LoweringTable

    lowerings = LoweringTable()

    def Gelu(X, *, approximate="none", float_type=None):
        return X

    lowerings.register("Gelu", since=20)(Gelu)
    entry = lowerings.select("Gelu", 21)
    assert entry.attribute_names == {"approximate"} and entry.engine_parameters == {"float_type"}
    assert lowerings.select("Gelu", 19) is None and "Gelu" in lowerings
    with pytest.raises(ValueError, match="torch lowering ai.onnx::Gelu since opset 20 is registered twice"):
        lowerings.register("Gelu", since=20)(Gelu)
