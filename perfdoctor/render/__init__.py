"""Report -> text, nothing else: terminal.py (rich), markdown.py, html.py (+ charts.py),
json_report.py. Renderers read a `perfdoctor.model.Report` and never measure or judge.
Modules are imported directly (matplotlib is loaded only by the HTML report)."""
