"""`perfdoctor view`: a run's trace in the Chrome trace viewer torch-tb-profiler ships,
served on 127.0.0.1 with no request leaving the machine, perfdoctor's step records on a
track of their own (markers.py)."""
