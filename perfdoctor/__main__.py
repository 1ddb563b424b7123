"""`python -m perfdoctor` is the `perfdoctor` command."""

from perfdoctor.cli import app

app(prog_name="perfdoctor")
