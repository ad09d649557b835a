"""The toolchain's version (pyproject.toml's), importable without importing the runtime."""

__version__ = "0.1.0"
