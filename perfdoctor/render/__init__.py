"""Report -> text, nothing else: terminal.py (rich), markdown.py, html.py (+ charts.py),
json_report.py; progress.py (the live display of `perfdoctor profile`) and
tensorboard_export.py (Report.series -> TensorBoard scalars). Renderers read a
`perfdoctor.model.Report` and never measure or judge.
Modules are imported directly (matplotlib is loaded only by the HTML report's charts that
need it; line_svg.py, bar_svg.py and loglog_svg.py draw the others without it)."""
