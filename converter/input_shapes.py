"""``--input-shape`` and ``--dynamic-batch``: the shapes a user gives the model's inputs.

A user fixes symbolic input dimensions (``input:1,3,224,224``) or makes the leading one a
symbolic batch. A size the model fixes cannot change (its weights and reshapes were built for
it); a named dimension is one size across the graph, so fixing it on one input fixes it on every
input and output that names it. Shapes inferred for intermediate values are dropped afterwards,
for shape inference to recompute them from the new inputs. The verifier of the written file uses
the same batch rule (:func:`batch_sizes_differ`).
"""

from __future__ import annotations

import onnx_ir as ir

from converter.errors import InvalidOptionError


def parse_input_shape(text: str) -> tuple[str, list[int | str]]:
    """Parse ``name:1,3,224,224`` (a dim may be a symbolic name, e.g. ``input:N,3,224,224``)."""
    name, sep, dims = text.rpartition(":")
    if not sep or not name or not dims:
        raise InvalidOptionError(f"--input-shape {text!r}: expected NAME:D0,D1,... e.g. input:1,3,224,224")
    shape: list[int | str] = []
    for dim in dims.split(","):
        dim = dim.strip()
        if dim.lstrip("-").isdigit():
            if int(dim) < 0:
                raise InvalidOptionError(f"--input-shape {text!r}: dimension {dim} is negative")
            shape.append(int(dim))
        elif dim.isidentifier():
            shape.append(dim)
        else:
            raise InvalidOptionError(f"--input-shape {text!r}: dimension {dim!r} is neither a size nor a name")
    return name, shape


def apply_input_shapes(
    model: ir.Model, input_shapes: dict[str, list[int | str]], dynamic_batch: bool
) -> list[str]:
    """Fix graph input shapes (``--input-shape``) and/or make the batch dim symbolic.

    Shapes previously inferred for intermediate values are dropped, so shape inference recomputes
    them from the new inputs. Returns warnings.
    """
    graph = model.graph
    warnings: list[str] = []
    inputs = {value.name: value for value in graph.inputs}
    unknown = sorted(set(input_shapes) - set(inputs))
    if unknown:
        raise InvalidOptionError(
            f"--input-shape names {unknown}, which are not inputs of the model; inputs are {sorted(inputs)}"
        )
    for name, shape in input_shapes.items():
        value = inputs[name]
        if value.shape is not None and len(value.shape) != len(shape):
            raise InvalidOptionError(
                f"--input-shape {name}: rank {len(shape)} given, the model's input has rank "
                f"{len(value.shape)} ({value.shape})"
            )
        if value.shape is not None:
            _check_fixed_sizes(name, list(value.shape), shape)
    named = _named_sizes(inputs, input_shapes)
    for name, shape in input_shapes.items():
        inputs[name].shape = ir.Shape(shape)
    for value in [*inputs.values(), *graph.outputs]:
        if value.name not in input_shapes and value.shape is not None and any(
                _dim_name(dim) in named for dim in value.shape):
            value.shape = ir.Shape([named.get(_dim_name(dim), dim) if _dim_name(dim) else dim for dim in value.shape])
    if dynamic_batch:
        _check_one_batch([value for value in graph.inputs if not value.is_initializer()])
        for value in graph.inputs:
            if value.is_initializer() or value.shape is None or len(value.shape) == 0:
                continue
            dims = list(value.shape)
            dims[0] = "batch"
            value.shape = ir.Shape(dims)
        for value in graph.outputs:
            if value.shape is not None and len(value.shape) > 0:
                dims = list(value.shape)
                dims[0] = "batch"
                value.shape = ir.Shape(dims)
    if input_shapes or dynamic_batch:
        _forget_intermediate_shapes(graph)
    return warnings


def _dim_name(dim) -> str | None:
    return dim.value if isinstance(dim, ir.SymbolicDim) else None


def _named_sizes(inputs: dict[str, ir.Value], input_shapes: dict[str, list[int | str]]) -> dict[str, int]:
    """The sizes ``--input-shape`` gives the model's named dimensions: a name is one size across
    the graph, so fixing ``input[batch, sequence]`` at 1,576 fixes a state's ``[2, batch, 128]``
    at batch 1 too. Two sizes for one name are an error."""
    named: dict[str, tuple[int, str]] = {}
    for name, shape in input_shapes.items():
        dims = inputs[name].shape
        for axis, (dim, size) in enumerate(zip(dims or (), shape)):
            label = _dim_name(dim)
            if label is None or not isinstance(size, int):
                continue
            first = named.setdefault(label, (size, f"{name} dimension {axis}"))
            if first[0] != size:
                raise InvalidOptionError(
                    f"--input-shape gives the model's dimension {label!r} two sizes: {first[0]} ({first[1]}) and "
                    f"{size} ({name} dimension {axis}); a named dimension is one size across the inputs"
                )
    return {label: size for label, (size, _) in named.items()}


def _check_one_batch(inputs: list[ir.Value]) -> None:
    """``--dynamic-batch`` names every input's first dimension "batch": inputs whose first sizes
    the model fixes differently (a [1, T] text beside a [2, 1, H] recurrent state) cannot share it."""
    fixed = {value.name: value.shape[0] for value in inputs
             if value.shape is not None and len(value.shape) > 0 and isinstance(value.shape[0], int)}
    if len(set(fixed.values())) > 1:
        raise batch_sizes_differ(fixed)


def batch_sizes_differ(sizes: dict[str, int]) -> InvalidOptionError:
    """The error for inputs whose first dimensions cannot be one batch (``sizes``: name -> size)."""
    listing = ", ".join(f"{name}: {size}" for name, size in sorted(sizes.items()))
    return InvalidOptionError(
        f"--dynamic-batch: the inputs' first dimensions differ ({listing}), so they cannot all be one batch "
        "dimension; convert without --dynamic-batch and name the symbolic sizes with --input-shape"
    )


def _check_fixed_sizes(name: str, model_dims: list, given: list[int | str]) -> None:
    """A size the model fixes cannot be replaced by another: its weights and reshapes were built
    for it, and the written model would fail or compute garbage at run time."""
    changed = [(axis, dim, size) for axis, (dim, size) in enumerate(zip(model_dims, given))
               if isinstance(dim, int) and isinstance(size, int) and dim != size]
    if not changed:
        return
    listing = "; ".join(f"dimension {axis} is fixed at {dim} by the model, {size} given" for axis, dim, size in changed)
    hint = ("; --dynamic-batch makes the leading dimension symbolic" if any(axis == 0 for axis, _, _ in changed)
            else "")
    raise InvalidOptionError(
        f"--input-shape {name}:{','.join(str(size) for size in given)}: {listing} (the model's input is "
        f"{name}[{', '.join(str(dim) for dim in model_dims)}]); only symbolic dimensions can be set: "
        f"give the model's size there{hint}"
    )


def _forget_intermediate_shapes(graph: ir.Graph) -> None:
    outputs = set(graph.outputs)
    for node in graph.all_nodes():
        for value in node.outputs:
            if value not in outputs:
                value.shape = None
