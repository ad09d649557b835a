"""A request checked against a served model version's signature before it is queued: exactly the
inputs the model takes, each of its datatype and shape (-1: any size), one batch size across the
inputs within ``max_batch_size`` when the model batches, the number of encoded images where the
model takes images, and only outputs the model has. Each refusal is an
:class:`InvalidRequestError` that names the model and says what it expects.
"""

from __future__ import annotations

from dataclasses import dataclass

from .datatypes import datatype_of
from .errors import InvalidRequestError
from .processing import ImagePreprocessing
from .types import InferenceRequest, TensorInfo


@dataclass(frozen=True)
class RequestSignature:
    """What a served model version takes (by served names) and gives."""

    name: str
    version: str
    inputs: dict[str, TensorInfo]
    outputs: frozenset[str]
    max_batch_size: int  # 0: the model does not batch
    image_input: str | None = None  # the input of encoded images (preprocessing "image")
    preprocess: ImagePreprocessing | None = None

    def check(self, request: InferenceRequest) -> int:
        """Validate the inputs against the signature; the batch size (1 when not batching)."""
        inputs = request.inputs
        if inputs.keys() != self.inputs.keys():
            missing = [name for name in self.inputs if name not in inputs]
            unknown = [name for name in inputs if name not in self.inputs]
            parts = ([f"missing input(s) {missing}"] if missing else []) + (
                [f"unknown input(s) {unknown}"] if unknown else [])
            raise InvalidRequestError(
                f"model {self.name} version {self.version}: {'; '.join(parts)}; "
                f"the model takes {list(self.inputs)}"
            )
        rows = -1
        for name, array in inputs.items():
            info = self.inputs[name]
            got = datatype_of(array.dtype)
            if got != info.datatype:
                raise InvalidRequestError(
                    f"model {self.name}: input {name!r} has datatype {got}, the model expects {info.datatype}"
                )
            if array.ndim != len(info.shape) or any(
                want != -1 and want != have for want, have in zip(info.shape, array.shape)
            ):
                raise InvalidRequestError(
                    f"model {self.name}: input {name!r} has shape {list(array.shape)}, "
                    f"the model expects {list(info.shape)} (-1: any size)"
                )
            if self.max_batch_size > 0:
                if rows not in (-1, array.shape[0]):
                    raise InvalidRequestError(
                        f"model {self.name}: inputs disagree on the batch size ({rows} vs {array.shape[0]} "
                        f"for {name!r})"
                    )
                rows = array.shape[0]
        if self.preprocess is not None:
            self.preprocess.check_count(inputs[self.image_input].size)
        if self.max_batch_size > 0 and not 1 <= rows <= self.max_batch_size:
            raise InvalidRequestError(
                f"model {self.name}: batch size {rows} is outside 1..{self.max_batch_size} (max_batch_size)"
            )
        for wanted in request.outputs:
            if wanted.name not in self.outputs:
                raise InvalidRequestError(
                    f"model {self.name}: unknown output {wanted.name!r} requested; "
                    f"the model has {sorted(self.outputs)}"
                )
        return rows if self.max_batch_size > 0 else 1  # an unbatched request counts as one item
