"""``--network module:Callable``: build a network of the train core from its definition.

``module`` is an importable module (the current directory is searched first, as ``python -m``
does) or a path to a ``.py`` file; ``Callable`` is a Cell class, a function returning a Cell, or a
Cell instance; dotted attributes (``models:resnet.small``) are followed. Keyword arguments can
follow in parentheses-free form ``module:Callable`` only; wrap other arguments in a function.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from converter.mindspore.errors import NetworkDefinitionError


def build_network(spec: str) -> Any:
    """The Cell that ``spec`` (``module:Callable``) builds."""
    module_name, sep, attribute = spec.rpartition(":")
    if not sep or not module_name or not attribute:
        raise NetworkDefinitionError(
            f"--network {spec!r}: expected module:Callable, e.g. train.models:LeNet5 or nets.py:build"
        )
    module = _import(module_name, spec)
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as err:
            raise NetworkDefinitionError(f"--network {spec!r}: {module_name} has no attribute {attribute!r}") from err
    from train.nn.cell import Cell

    if not isinstance(target, Cell):
        if not callable(target):
            raise NetworkDefinitionError(f"--network {spec!r}: {attribute} is neither a Cell nor callable")
        try:
            target = target()
        except Exception as err:  # user code: name it, keep its message
            raise NetworkDefinitionError(
                f"--network {spec!r}: calling {attribute}() failed ({type(err).__name__}: {err}); it must "
                "build the network without arguments"
            ) from err
    if not isinstance(target, Cell):
        raise NetworkDefinitionError(
            f"--network {spec!r}: {attribute}() returned a {type(target).__name__}, not a train.nn.Cell; "
            "define the network with the train core (from train import nn)"
        )
    return target


def _import(module_name: str, spec: str) -> Any:
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise NetworkDefinitionError(f"--network {spec!r}: no such file {path}")
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            if module_spec is None or module_spec.loader is None:
                raise NetworkDefinitionError(f"--network {spec!r}: {path} cannot be imported")
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
            return module
        sys.path.insert(0, os.getcwd())
        try:
            return importlib.import_module(module_name)
        finally:
            sys.path.remove(os.getcwd())
    except NetworkDefinitionError:
        raise
    except Exception as err:  # ImportError, or anything the module raises while importing
        raise NetworkDefinitionError(
            f"--network {spec!r}: cannot import {module_name} ({type(err).__name__}: {err})"
        ) from err
