"""Where a script's batch size can be changed (optimize/batch_knob.py)."""

from __future__ import annotations

from perfdoctor.optimize.batch_knob import argv_with_batch, declared_option, find_knob
from perfdoctor.run_schema import DataLoaderInfo, SourceLine


def test_an_argument_on_the_command_line_wins() -> None:
    knob = find_knob(["--epochs", "2", "--batch-size", "48"], None, [], 48)
    assert (knob.kind, knob.batch, knob.option) == ("argument", 48, "--batch-size")
    knob = find_knob(["--batch_size=24"], None, [], None)
    assert (knob.kind, knob.batch, knob.option) == ("argument", 24, "--batch_size")


def test_an_argument_declared_in_the_source_takes_the_observed_batch() -> None:
    source = 'parser.add_argument("--batch-size", type=int, default=64)\n'
    assert declared_option(source) == "--batch-size"
    knob = find_knob([], source, [], 64)
    assert (knob.kind, knob.batch) == ("argument", 64)
    assert knob.changeable


def test_a_dataloader_without_a_batch_sampler_is_rebuilt() -> None:
    loader = DataLoaderInfo(
        batch_size=32,
        explicit=["dataset", "batch_size"],
        location=SourceLine(file="train.py", line=12),
    )
    knob = find_knob([], "x = 1\n", [loader], 32)
    assert (knob.kind, knob.batch) == ("dataloader", 32)
    assert "train.py:12" in knob.why
    sampled = DataLoaderInfo(batch_size=None, explicit=["dataset", "batch_sampler"])
    assert find_knob([], "", [sampled], 32).kind == "none"


def test_a_hand_rolled_batch_says_why_in_one_line() -> None:
    knob = find_knob([], "xb = X[i : i + 32]\n", [], 32)
    assert knob.kind == "none" and not knob.changeable
    assert "\n" not in knob.why and "cannot be changed" in knob.why


def test_argv_with_batch_replaces_or_appends() -> None:
    assert argv_with_batch(["--batch-size", "32", "--lr", "1"], "--batch-size", 64) == (
        "--batch-size",
        "64",
        "--lr",
        "1",
    )
    assert argv_with_batch(["--bs=8"], "--bs", 16) == ("--bs=16",)
    assert argv_with_batch(["--lr", "1"], "--batch-size", 8) == ("--lr", "1", "--batch-size", "8")


def test_the_declared_default_beats_the_observed_first_dimension() -> None:
    # pytorch/examples word_language_model: inputs are (bptt=35, batch=20).
    source = "parser.add_argument('--batch_size', type=int, default=20, metavar='N',\n"
    knob = find_knob([], source, [], 35)
    assert (knob.kind, knob.batch, knob.option) == ("argument", 20, "--batch_size")
