#!/usr/bin/env bash
# Rewrite constraints/ci.txt with what `pip install -e ".[dev]"` resolves today, in a fresh venv,
# then run the test suite with it before committing the new file.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/pip" install -q -e ".[dev]"
{
  echo "# The versions CI ran the test suite with: pip install -e \".[dev]\" -c constraints/ci.txt."
  echo "# pyproject.toml's requirements stay ranges; refresh this file with constraints/refresh.sh."
  # torch's CPU build carries a local label (2.13.0+cpu): the pin names the release.
  "$venv/bin/pip" freeze --exclude-editable | sed -E 's/^(torch==[^+]+)[+]cpu$/\1/'
} > constraints/ci.txt
