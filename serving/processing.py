"""Optional pre- and post-processing around a model.

Pre-processing (config ``"preprocessing": "image"``) lets clients send encoded PNG/JPEG bytes:
each image goes through the model's ``preprocessing`` metadata spec (decode, resize, center crop,
scale, normalize, layout), implemented once in :mod:`lite.preprocessing` and shared with the
converter's calibration. Here its errors become the server's: a bad spec is a ConfigError, a bad
image (not PNG or JPEG, or over ``lite.preprocessing.MAX_IMAGE_PIXELS`` by its header) an
InvalidRequestError. A request carries at most ``max_batch_size`` images, or
:data:`MAX_IMAGES_UNBATCHED` for a model without batching: more is a ResourceExhaustedError, before
any is decoded. Decoding is the costly part of such a request (a few KB of PNG can decode to tens
of megapixels), so both bounds together bound the CPU one request can take.

Post-processing is Triton's ``classification`` parameter on a requested output: the top-k
classes as BYTES strings ``"score:index:label"`` (``label`` from the ``labels`` metadata, a JSON
list; omitted when the model has none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from lite.errors import PreprocessingError
from lite.preprocessing import ImagePreprocessing as _Spec

from .errors import ConfigError, InvalidRequestError, ResourceExhaustedError

# Images one request may carry to a model that does not batch (its image input takes any number):
# a few, as a client sending several photos at once would; each may be up to MAX_IMAGE_PIXELS.
MAX_IMAGES_UNBATCHED = 8


@dataclass(frozen=True)
class ImagePreprocessing:
    """The model's image preprocessing (``lite.preprocessing``) with the server's error types."""

    spec: _Spec
    max_batch_size: int = 0  # 0: the model does not batch

    @property
    def input_name(self) -> str:
        return self.spec.input_name

    @classmethod
    def from_model(cls, metadata: dict[str, str], inputs: list, max_batch_size: int = 0) -> ImagePreprocessing:
        """``max_batch_size`` (0: the model does not batch) bounds the images of one request."""
        try:
            spec = _Spec.from_metadata(metadata, inputs)
        except PreprocessingError as err:
            raise ConfigError(f"model metadata 'preprocessing': {err}") from err
        return cls(spec, max_batch_size)

    def check_count(self, count: int) -> None:
        """Refuse a request of more images than one request may carry, before any is decoded."""
        if self.max_batch_size > 0:
            most, limit = self.max_batch_size, "the model's max_batch_size"
        else:
            most, limit = MAX_IMAGES_UNBATCHED, "the limit for a model without batching"
        if count > most:
            raise ResourceExhaustedError(
                f"{count} images in one request; at most {most} ({limit}): send them in several requests"
            )

    def __call__(self, images: np.ndarray) -> np.ndarray:
        """Encoded images (object array of bytes, one per batch item) -> the model's input; the
        request was checked with :meth:`check_count` when it came in."""
        planes = []
        for index, item in enumerate(images.reshape(-1)):
            if not isinstance(item, (bytes, bytearray)):
                raise InvalidRequestError(f"image {index}: expected encoded image bytes")
            try:
                planes.append(self.spec.from_bytes(bytes(item)))
            except PreprocessingError as err:
                raise InvalidRequestError(f"image {index}: {err}") from err
        return np.stack(planes)


def labels_of(metadata: dict[str, str], output: str | None = None) -> list[str]:
    """The class labels of ``output``: the converter's ``class_labels`` entry for it (JSON: output
    name -> labels, written for scikit-learn's ZipMap classifiers), else the model's ``labels``
    (a JSON list, or one label per line), else none."""
    per_output = _json_object(metadata.get("class_labels"))
    if output is not None and isinstance(per_output.get(output), list):
        return [str(label) for label in per_output[output]]
    raw = metadata.get("labels")
    if not raw:
        return []
    try:
        labels = json.loads(raw)
    except json.JSONDecodeError:
        return [line for line in raw.splitlines() if line]
    return [str(label) for label in labels] if isinstance(labels, list) else []


def tensor_metadata(metadata: dict[str, str], served: dict[str, str]) -> dict[str, str]:
    """The converter's per-tensor metadata a remote client needs, keyed by served tensor names
    (``served``: model name -> served name), as JSON: ``class_labels`` (which class each column
    of a classifier's probabilities is) and ``feature_names`` (which key each column of a
    DictVectorizer input is; a wrong order gives wrong answers silently)."""
    found = {}
    for key in ("class_labels", "feature_names"):
        entries = _json_object(metadata.get(key))
        if entries:
            found[key] = json.dumps({served.get(name, name): value for name, value in entries.items()})
    return found


def _json_object(raw: str | None) -> dict:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def classify(scores: np.ndarray, k: int, labels: list[str], batched: bool) -> np.ndarray:
    """Top-k "score:index[:label]" strings per batch item (or over the whole tensor)."""
    if scores.dtype.kind not in ("f", "i", "u", "b"):
        kind = "BYTES" if scores.dtype.kind in "OSU" else str(scores.dtype)
        raise InvalidRequestError(f"classification needs a numeric output, got {kind}")
    rows = scores.reshape(scores.shape[0], -1) if batched and scores.ndim > 0 else scores.reshape(1, -1)
    k = min(k, rows.shape[1])
    result = np.empty((rows.shape[0], k), dtype=object)
    for r, row in enumerate(rows):
        top = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        for c, index in enumerate(top):
            text = f"{float(row[index]):f}:{int(index)}"
            if index < len(labels):
                text += f":{labels[index]}"
            result[r, c] = text.encode()
    return result if batched else result.reshape(k)
