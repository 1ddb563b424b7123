"""`python -m perfdoctor` is the `perfdoctor` command."""

from perfdoctor.cli import run

run()
