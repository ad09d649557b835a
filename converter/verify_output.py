"""Verifying a written output against its original (``convert(verify=...)``): the glue between
the conversion and :mod:`converter.verify`.

The converted file runs on lite's numpy engine (for .lite; on its ONNX Runtime engine when the
numpy engine has no kernel for some nodes, ONNX Runtime's own ops) or in ONNX Runtime (for .onnx);
inputs come from ``verify_data`` or are planned from the graph; a failure is located with
:mod:`converter.divergence` and worded by :func:`failure_message`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from converter.errors import InvalidOptionError, VerificationError
from converter.input_shapes import batch_sizes_differ
from converter.onnx_export import to_onnx
from converter.reference_session import run_onnxruntime
from converter.verify import InputsRejectedError, Verification, verify_conversion
from lite.compare import Tolerance
from lite.errors import KernelError, LiteError
from lite.format import ir as lite_ir

_FAILS_TO_RUN = "the converted model fails in"


def verify_output(original, model: ir.Model, exported, path: Path, suffix: str, fp16_io: bool, tolerance: Tolerance,
                  input_shapes, verify_data, dynamic_batch: bool = False,
                  custom_op_libraries: tuple[str, ...] = ()) -> Verification:
    """Verify the file just written at ``path`` against ``original`` (see the module docstring);
    with ``dynamic_batch``, also check that the converted model runs one batch larger and that its
    outputs lead with the batch (:func:`check_batch_axis`). ``custom_op_libraries`` are registered
    with ONNX Runtime for both the original and the converted model."""
    signature = exported if exported is not None else ir.to_proto(_interface_only(model))
    input_dtypes = None
    if fp16_io:  # the converted model takes float16 where the original takes float32
        input_dtypes = {value.name: onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
                        for value in signature.graph.input if value.type.HasField("tensor_type")}
    engine = _LiteRunner(path, custom_op_libraries) if suffix == ".lite" else None
    if engine is not None:
        name = engine.name

        def run(feeds):
            try:
                return engine(feeds)
            except KernelError as err:
                if not _a_defect(err) and _reads_an_input(engine.model, _innermost(err)):
                    raise InputsRejectedError(
                        f"{engine.name} refuses them where ONNX Runtime ran the original: {err}"
                    ) from err
                raise VerificationError(f"{_FAILS_TO_RUN} {engine.name} on inputs the original runs on ({err})") from err
            except (LiteError, MemoryError) as err:
                raise VerificationError(f"{_FAILS_TO_RUN} {engine.name} on inputs the original runs on ({err})") from err
    else:
        converted = exported if exported is not None else to_onnx(model)
        name = "onnxruntime (ONNX export of the converted graph)"

        def run(feeds):
            return run_onnxruntime(converted, feeds, what="the converted model")

    samples = _verify_samples(verify_data, original) if verify_data is not None else None
    verification = verify_conversion(original, run, name, tolerance, input_shapes=input_shapes,
                                     verify_data=samples, input_dtypes=input_dtypes,
                                     custom_op_libraries=custom_op_libraries)
    if engine is not None:
        verification.engine = engine.name
    if verification.status == "failed" and engine is not None and verification.feeds:
        from converter.divergence import first_divergence
        from lite.format import load

        feeds = {k: v.astype(input_dtypes[k]) if input_dtypes and k in input_dtypes else v
                 for k, v in verification.feeds.items()}
        verification.divergence = first_divergence(original, load(path), feeds, verification.tolerance)
    if dynamic_batch and verification.passed and verification.feeds:
        feeds = {k: v.astype(input_dtypes[k]) if input_dtypes and k in input_dtypes else v
                 for k, v in verification.feeds.items()}
        check_batch_axis(run, feeds)
    return verification


def check_batch_axis(run, feeds: dict[str, np.ndarray]) -> None:
    """``--dynamic-batch`` labels the first axis of every input and output as the batch; check
    that claim on the converted model: the verified inputs, one row longer (the first row
    repeated), must run and give outputs one row longer. A shape written for one batch size (a
    Reshape to ``[1, -1]``), inputs that do not lead with the batch (an RNN's ``[layers, batch,
    hidden]`` state) or outputs that do not (an OCR model's ``[sequence, batch, classes]``) are
    refused here, not in the first batched request a server merges."""
    leading = {name: value.shape[0] for name, value in feeds.items() if np.ndim(value) > 0}
    if not leading:
        return
    if len(set(leading.values())) > 1:
        raise batch_sizes_differ(leading)
    batch = next(iter(leading.values())) + 1
    grown = {name: np.concatenate([value, value[:1]]) if name in leading else value for name, value in feeds.items()}
    try:
        outputs = run(grown)
    except (VerificationError, InputsRejectedError) as err:
        raise InvalidOptionError(
            f"--dynamic-batch: the converted model fails at batch size {batch} on the verified inputs with one row "
            f"added ({err}); the model fixes its batch size somewhere (e.g. a Reshape to a constant shape): "
            "convert without --dynamic-batch, or export the model with a dynamic batch axis"
        ) from err
    wrong = {name: list(np.shape(value)) for name, value in outputs.items()
             if np.ndim(value) > 0 and np.shape(value)[0] != batch}
    if wrong:
        listing = "; ".join(f"{name} has shape {shape}" for name, shape in sorted(wrong.items()))
        raise InvalidOptionError(
            f"--dynamic-batch: at batch size {batch} output(s) do not lead with the batch ({listing}); a server "
            "splits merged requests along the first axis of every output, so this model cannot be batched: "
            "convert without --dynamic-batch"
        )


def _innermost(err: KernelError) -> lite_ir.Node | None:
    """The node that failed: inside a subgraph, the node of the body, not the If or Loop that
    ran it (each level's KernelError is the cause of the next)."""
    node = err.node
    cause = err.__cause__
    while cause is not None:
        if isinstance(cause, KernelError) and cause.node is not None:
            node = cause.node
        cause = cause.__cause__
    return node


def _reads_an_input(model: lite_ir.Model | None, node: lite_ir.Node | None) -> bool:
    """Whether ``node`` reads one of the model's inputs directly (its kernel judged those
    values), in the main graph or, captured by name, in a subgraph."""
    if model is None or node is None:
        return False
    main = model.main
    for graph in model.graphs[1:]:
        if any(candidate is node for candidate in graph.nodes):
            inputs = {main.tensors[index].name for index in main.inputs}
            captured = {graph.tensors[index].name for index in graph.captures}
            return any(0 <= index < len(graph.tensors) and graph.tensors[index].name in inputs & captured
                       for index in node.inputs)
    return bool(set(node.inputs) & set(main.inputs))


def _verify_samples(source: Any, original: onnx.ModelProto) -> list[dict[str, np.ndarray]]:
    """``verify_data`` as the model's inputs: a .npz file holds them whole (one array per input
    name, any shapes the model takes); a folder or an iterable holds samples in the calibration
    format, of which the first becomes a batch of one."""
    from converter.quantize.data import InputSpec, batches

    initializers = {init.name for init in original.graph.initializer}
    if isinstance(source, (str, os.PathLike)) and Path(source).suffix.lower() == ".npz" and Path(source).is_file():
        return [_npz_inputs(Path(source), original, initializers)]
    specs = []
    for value in original.graph.input:
        if value.name in initializers or not value.type.HasField("tensor_type"):
            continue
        tensor = value.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim)
        specs.append(InputSpec(value.name, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)), shape))
    for batch in batches(source, specs, batch_size=1, limit=1):
        return [batch.feeds]
    raise InvalidOptionError(f"verify data {source!r} holds no sample")


def _npz_inputs(path: Path, original: onnx.ModelProto, initializers: set[str]) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as err:
        raise InvalidOptionError(f"verify data {path}: not a readable .npz file ({err})") from err
    feeds = {}
    for value in original.graph.input:
        if value.name in initializers:
            continue
        if value.name not in arrays:
            raise InvalidOptionError(f"verify data {path}: no array named {value.name!r}; it holds {sorted(arrays)}")
        elem_type = value.type.tensor_type.elem_type if value.type.HasField("tensor_type") else 0
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type) if elem_type else None
        feeds[value.name] = arrays[value.name] if dtype is None else arrays[value.name].astype(dtype, copy=False)
    return feeds


# Python's errors of code, not of data: a kernel that fails so failed whatever its inputs (numpy
# 1.x refusing reshape's copy= keyword, which numpy 2.1 added), so its node reading a model input
# says nothing about the inputs, and the verification fails instead of being skipped.
_DEFECTS = (TypeError, AttributeError, NameError, ImportError, AssertionError, NotImplementedError)


def _a_defect(err: BaseException) -> bool:
    while err is not None:
        if isinstance(err, _DEFECTS) and not isinstance(err, LiteError):
            return True
        err = err.__cause__ or err.__context__
    return False


def failure_message(verification: Verification) -> str:
    if not verification.outputs and verification.reason and verification.reason.startswith(_FAILS_TO_RUN):
        # Nothing was compared: no tolerance would change the verdict.
        return (f"{verification.reason} (inputs: {verification.inputs}); nothing was compared: the converted model "
                "did not run. Run it on an engine that has kernels for those nodes, or pass verify=False (--no-verify)")
    message = f"converted model differs from the original on {verification.inputs}: {verification.reason}"
    divergence = verification.divergence or {}
    if divergence.get("node"):
        message += (f". First diverging node: {divergence['node']} ({divergence['op_type']}), tensor "
                    f"{divergence['tensor']!r}, computed in the converted model by {divergence['converted_as']}: "
                    f"{divergence['error']}")
    elif divergence.get("note"):
        message += f". {divergence['note']}"
    hint = "; see the report, convert with optimize=False (--no-optimize) to tell whether an optimization pass is the cause"
    if (verification.inputs or "").startswith("synthesized"):  # random inputs can drive a sensitive network off its domain
        hint += ", verify on real inputs with --verify-data FILE.npz|DIR (verify_data=)"
    return message + hint + ", or give --rtol/--atol"


def _interface_only(model: ir.Model) -> ir.Model:
    graph = ir.Graph(
        inputs=[ir.val(v.name, v.dtype, v.shape) for v in model.graph.inputs if not v.is_initializer()],
        outputs=[],
        nodes=[],
        opset_imports=dict(model.opset_imports),
    )
    return ir.Model(graph, ir_version=model.ir_version)


class _LiteRunner:
    """Runs the written .lite file on lite's numpy engine (the reference every other engine is
    checked against), or on its ONNX Runtime engine when the numpy engine has no kernel for some
    nodes (ONNX Runtime's own ops kept in the model, or ops of the custom op ``libraries``);
    ``name`` says which ran it."""

    def __init__(self, path: Path, libraries: tuple[str, ...] = ()) -> None:
        self.path = path
        self.libraries = libraries
        self.name = "lite.Model (numpy engine)"
        self.model: lite_ir.Model | None = None  # the graphs of the last run (a failure's node is theirs)

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
        import lite

        try:
            model = lite.Model.load(str(self.path), device="numpy")
        except lite.UnsupportedOpError:
            # Named first: a failure to load there too is the ONNX Runtime engine's.
            self.name = "lite.Model (ONNX Runtime engine: the numpy engine has no kernel for some nodes)"
            model = lite.Model.load(str(self.path), device="cpu", cache_dir=None, custom_op_libraries=self.libraries)
        self.model = model.ir
        return model.predict(feeds)
