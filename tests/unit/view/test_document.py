"""The served trace: the file's JSON with the markers first in its event array, the bytes
on disk untouched."""

from __future__ import annotations

import json

import pytest

from perfdoctor.errors import CorruptArtifact
from perfdoctor.view.document import splice_events

MARK = {"ph": "i", "s": "g", "name": "m", "pid": "perfdoctor", "tid": 1, "ts": 5}


@pytest.mark.parametrize(
    "doc",
    [
        {"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}]},
        {"traceEvents": [], "displayTimeUnit": "ms"},
        {"deviceProperties": [{"name": "x"}], "traceEvents": [{"ph": "M", "name": "b"}]},
    ],
)
def test_markers_go_first_in_the_event_array(doc):
    raw = json.dumps(doc, indent=1).encode()
    served = json.loads(splice_events(raw, [MARK]))
    assert served["traceEvents"] == [MARK, *doc["traceEvents"]]
    assert {k: v for k, v in served.items() if k != "traceEvents"} == {
        k: v for k, v in doc.items() if k != "traceEvents"
    }


def test_a_bare_array_of_events():
    assert json.loads(splice_events(b' [{"ph": "X"}]', [MARK])) == [MARK, {"ph": "X"}]
    assert json.loads(splice_events(b"[ ]", [MARK])) == [MARK]


def test_a_key_inside_a_string_is_not_the_array():
    raw = b'{"note": "x \\"traceEvents\\": [", "traceEvents": [{"ph": "X"}]}'
    assert json.loads(splice_events(raw, [MARK]))["traceEvents"] == [MARK, {"ph": "X"}]


def test_nothing_to_add_serves_the_file_as_it_is():
    raw = b'{"traceEvents": [1]}'
    assert splice_events(raw, []) is raw


@pytest.mark.parametrize("raw", [b'{"events": []}', b"not json", b""])
def test_no_event_array_is_refused(raw):
    for events in ([MARK], []):
        with pytest.raises(CorruptArtifact):
            splice_events(raw, events, name="t.json")
