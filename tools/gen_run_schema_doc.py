"""Rewrite the field tables of docs/run-directory.md from perfdoctor/run_schema.py.

    python tools/gen_run_schema_doc.py           # rewrite the doc
    python tools/gen_run_schema_doc.py --check   # exit 1 when the doc is out of date

tests/unit/test_run_schema.py runs the same check, so a schema change without this
regeneration fails the unit tests.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfdoctor.run_schema_doc import replace_section, schema_tables

DOC = Path(__file__).resolve().parent.parent / "docs" / "run-directory.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is current")
    args = parser.parse_args()
    current = DOC.read_text()
    wanted = replace_section(current, schema_tables())
    if args.check:
        if wanted != current:
            print(f"{DOC.name} is out of date: run python tools/gen_run_schema_doc.py")
            return 1
        return 0
    DOC.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
