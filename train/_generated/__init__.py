"""Generated code; see scripts/generate.py."""
