#!/usr/bin/env python3
"""Run every conformance case and rewrite tests/conformance/exclusions.py from the failures.

    python -m tests.conformance.survey            # print the counts
    python -m tests.conformance.survey --write    # regenerate exclusions.py

Each failure gets a reason from its error (see REASONS); an unexplained failure is listed with
its error text so that a person writes the reason, or fixes the engine.
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from pathlib import Path

from tests.conformance.runner import DATA_SETS, all_case_names, load_case, run_case

# (pattern on the error text, reason). First match wins.
REASONS = [
    (r"has dtype (bfloat16|float8\w*|float4\w*|u?int4|u?int2|float8_e8m0fnu), the model expects",
     "bfloat16/float8/float4/4-bit/2-bit graph inputs: the numpy engine holds these types as raw storage "
     "words and has no typed arithmetic for them yet"),
    (r"element type (FLOAT8\w*|FLOAT4\w*|U?INT4|U?INT2) has no native numpy type",
     "Cast to float8/float4/4-bit/2-bit: no numpy type to cast to yet"),
    (r"output \w+: dtype uint16, expected bfloat16", "bfloat16 outputs are returned as raw uint16 words"),
    (r"ai\.onnx\.preview\.training::(Adagrad|Adam|Momentum|Gradient)",
     "training operator (ai.onnx.preview.training), not inference"),
    (r"\((Bernoulli|RandomUniformLike|RandomNormalLike|RandomUniform|RandomNormal|Multinomial)\)",
     "random operator: outputs cannot match the reference's random draws"),
    (r"\(DeformConv\)", "DeformConv (opset 19) has no numpy kernel yet"),
    (r"attribute 'round_mode'", "Cast to FLOAT8E8M0 (round_mode) is not implemented"),
    (r"test_training_dropout", "Dropout in training mode draws a random mask the reference cannot share"),
    (r"\(ImageDecoder\)", "ImageDecoder needs an image codec, which the edge runtime does not ship"),
]


def reason_for(error: str) -> str:
    for pattern, reason in REASONS:
        if re.search(pattern, error):
            return reason
    return f"UNEXPLAINED: {error[:160]}"


def survey() -> dict[str, str]:
    failures = {}
    for name in all_case_names():
        try:
            run_case(load_case(name))
        except Exception as err:  # every failure is recorded, with its reason
            text = f"{type(err).__name__}: {err}".replace("\n", " ")
            failures[name] = reason_for(f"{name} {text}")
    return failures


def write(failures: dict[str, str]) -> None:
    lines = ['"""Conformance cases that do not pass, each with the reason. Regenerate with', "",
             "    python -m tests.conformance.survey --write", "",
             'An "UNEXPLAINED" entry is a bug to fix or a reason to write by hand.', '"""', "",
             "EXCLUSIONS: dict[str, str] = {"]
    for name, reason in sorted(failures.items()):
        lines.append(f"    {name!r}: {reason!r},")
    lines.append("}")
    (Path(__file__).parent / "exclusions.py").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    failures = survey()
    names = all_case_names()
    for group in ("node", *DATA_SETS):
        members = [n for n in names if (n.split("/")[0] if "/" in n else "node") == group]
        failed = [n for n in members if n in failures]
        print(f"{group:<20} {len(members) - len(failed):>5} of {len(members)} pass")
    unexplained = [n for n, r in failures.items() if r.startswith("UNEXPLAINED")]
    print(f"{len(unexplained)} unexplained failures")
    if args.write:
        write(failures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
