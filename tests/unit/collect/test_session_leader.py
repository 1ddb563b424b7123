"""os.setpgrp() in a script started as a session leader (as perfdoctor starts the child)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CALLS = "import os; os.setpgrp(); os.setpgid(0, 0); os.setpgid(os.getpid(), 0); print('ok')"


def _as_session_leader(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
        check=False,
    )


@pytest.mark.skipif(not hasattr(os, "setpgrp"), reason="POSIX only")
def test_setpgrp_in_a_session_leader_is_what_it_already_has() -> None:
    plain = _as_session_leader(CALLS)
    assert plain.returncode != 0 and "PermissionError" in plain.stderr  # the kernel's EPERM
    fixed = _as_session_leader(
        "from perfdoctor.collect import session_leader; session_leader.install(); " + CALLS
    )
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.strip() == "ok"


@pytest.mark.skipif(not hasattr(os, "setpgrp"), reason="POSIX only")
def test_other_refusals_still_reach_the_script() -> None:
    # Moving another process (pid 1) into a group stays the kernel's to refuse.
    proc = _as_session_leader(
        "from perfdoctor.collect import session_leader; session_leader.install()\n"
        "import os\n"
        "try:\n    os.setpgid(1, 0)\nexcept OSError as err:\n    print(type(err).__name__)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() in ("PermissionError", "ProcessLookupError")
