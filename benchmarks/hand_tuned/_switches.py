"""The hand-tuned copies' own switches, taken off the command line before the sample's parser
sees it (the rest of the command line is the sample's)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

SAMPLE_MODELS = Path(__file__).resolve().parents[2] / "sample_models"
SWITCHES = ("--no-compile", "--no-amp")


def parse_with_switches(parse_sample_args: Callable[[], argparse.Namespace]) -> argparse.Namespace:
    argv = sys.argv[1:]
    sys.argv = [sys.argv[0], *(a for a in argv if a not in SWITCHES)]
    args = parse_sample_args()
    args.compile = "--no-compile" not in argv
    args.amp = "--no-amp" not in argv
    return args
