"""One implementation of the tables from ONNX operators to the functions that implement them.

The numpy engine's kernels (:class:`lite.ops.registry.KernelRegistry`) and the torch engine's
lowerings (:class:`lite.engines.torch.ops.registry.LoweringTable`) are both plain functions named
after an ONNX op type, registered for a (domain, op type) with the opset version they implement
from, whose keyword-only parameters are the node's attributes, except the few the engine fills in.

Selection follows ONNX versioning (https://onnx.ai/onnx/repo-docs/Versioning.html): for a model
importing opset ``v`` of the domain, the entry with the largest ``since`` not above ``v`` runs.
Registering the same (domain, op type, since) twice is an error at import time.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

# The default ONNX domain has two spellings; both mean the same operator set.
_DEFAULT_DOMAINS = ("", "ai.onnx")


def normalize_domain(domain: str) -> str:
    return "" if domain in _DEFAULT_DOMAINS else domain


class Versioned(Protocol):
    """What a table entry says about itself."""

    @property
    def op_type(self) -> str: ...

    @property
    def domain(self) -> str: ...

    @property
    def since_version(self) -> int: ...


Entry = TypeVar("Entry", bound=Versioned)


class OpRegistry(Generic[Entry]):
    """Entries keyed by (domain, op type), each with the opset versions it implements from."""

    def __init__(self, what: str) -> None:
        self._what = what  # "kernel", "torch lowering": names an entry in errors
        self._entries: dict[tuple[str, str], list[Entry]] = {}

    def add(self, entry: Entry) -> None:
        key = (normalize_domain(entry.domain), entry.op_type)
        versions = self._entries.setdefault(key, [])
        if any(known.since_version == entry.since_version for known in versions):
            raise ValueError(
                f"{self._what} {key[0] or 'ai.onnx'}::{entry.op_type} since opset "
                f"{entry.since_version} is registered twice"
            )
        versions.append(entry)
        versions.sort(key=lambda known: known.since_version)

    def select(self, op_type: str, domain: str, opset_version: int) -> Entry | None:
        """The newest entry whose ``since`` is not above ``opset_version``, or None."""
        chosen = None
        for candidate in self._entries.get((normalize_domain(domain), op_type), []):
            if candidate.since_version <= opset_version:
                chosen = candidate
        return chosen

    def versions(self, op_type: str, domain: str = "") -> list[int]:
        return [entry.since_version for entry in self._entries.get((normalize_domain(domain), op_type), [])]

    def op_types(self, domain: str = "") -> list[str]:
        domain = normalize_domain(domain)
        return sorted(op for (d, op) in self._entries if d == domain)

    def __contains__(self, key: tuple[str, str]) -> bool:
        domain, op_type = key
        return (normalize_domain(domain), op_type) in self._entries


@dataclass(frozen=True)
class KeywordParameters:
    """What a registered function's keyword-only parameters say it takes."""

    attributes: frozenset[str]  # the node's attributes, by ONNX name
    engine: frozenset[str]  # those of the engine's own parameters it asks for
    any_attribute: bool  # it takes ``**attributes``: every attribute is passed


def keyword_parameters(fn: Callable, engine_parameters: Collection[str]) -> KeywordParameters:
    """Split ``fn``'s keyword-only parameters into ONNX attributes and parameters the engine fills in."""
    attributes, engine, any_attribute = set(), set(), False
    for parameter in inspect.signature(fn).parameters.values():
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            (engine if parameter.name in engine_parameters else attributes).add(parameter.name)
        elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
            any_attribute = True
    return KeywordParameters(frozenset(attributes), frozenset(engine), any_attribute)
