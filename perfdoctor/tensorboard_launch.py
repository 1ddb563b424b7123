"""Start TensorBoard on a session directory, bound to 127.0.0.1 on a free port.

TensorBoard runs as a child process (`python -m tensorboard.main`) so the CLI stays in
charge: it prints the URL, waits, and stops it on Ctrl-C. We wait until the server answers
before handing out the URL, with a bound on the wait, and never leave a half-started
server behind.
"""

from __future__ import annotations

import importlib.util
import logging
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from perfdoctor.errors import EXIT_MISSING_TOOL, BadRunDir, MissingTool, PerfdoctorError

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
PLUGIN_INSTALL_HINT = (
    "the PyTorch Profiler tab needs the torch-tb-profiler plugin: "
    "pip install torch-tb-profiler   (or: pip install 'perfdoctor[tb]')"
)
_PORT_ATTEMPTS = 3
_LOG_TAIL_CHARS = 2000


def profiler_plugin_installed() -> bool:
    """Whether TensorBoard will show the PyTorch Profiler tab (torch-tb-profiler)."""
    try:
        import torch_tb_profiler  # noqa: F401
    except Exception:  # a broken install is as good as none; ImportError is the usual case
        return False
    return True


def free_port(host: str = HOST) -> int:
    """A port the OS says is free right now (another process may still take it first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def start_tensorboard(
    logdir: Path, port: int | None = None, *, ready_timeout_s: float = 60.0
) -> tuple[subprocess.Popen[bytes], str]:
    """Start TensorBoard on `logdir`; return the process and its URL once it answers.

    Without `port`, a free one is picked, and another is tried if TensorBoard loses the race
    for it. Raises MissingTool when tensorboard is not installed, BadRunDir when `logdir` is
    not a directory, TensorBoardFailed (exit code 69) when the server does not come up.
    """
    if importlib.util.find_spec("tensorboard") is None:
        raise MissingTool("tensorboard is not installed", hint="pip install tensorboard")
    if not logdir.is_dir():
        raise BadRunDir(f"not a directory: {logdir}")
    attempts = 1 if port is not None else _PORT_ATTEMPTS
    last_error: TensorBoardFailed | None = None
    for _ in range(attempts):
        chosen = port if port is not None else free_port()
        try:
            return _start_once(logdir, chosen, ready_timeout_s)
        except _PortTaken as err:
            last_error = TensorBoardFailed(str(err), hint="choose another port, or leave it out")
            log.debug("port %d taken, trying another", chosen)
    assert last_error is not None
    raise last_error


def stop_tensorboard(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """Terminate, then kill if it does not stop within `timeout_s`; the same for anything
    it started (a data server), so that nothing keeps serving after perfdoctor returns.

    All of them at once: TensorBoard and its data server each take about a second to exit,
    and stopping one after the other doubled that."""
    import psutil

    from perfdoctor.collect.supervision import terminate_then_kill

    try:
        tree = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    except psutil.Error:  # gone already; its helpers, if any, were re-parented and are not ours
        tree = []
    terminate_then_kill(tree, timeout_s)
    process.wait(timeout=timeout_s)


class TensorBoardFailed(PerfdoctorError):
    """TensorBoard is installed but did not come up: for the user, the tool is unavailable."""

    exit_code = EXIT_MISSING_TOOL


class _PortTaken(TensorBoardFailed):
    pass


def _start_once(
    logdir: Path, port: int, ready_timeout_s: float
) -> tuple[subprocess.Popen[bytes], str]:
    url = f"http://{HOST}:{port}/"
    command = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        str(logdir),
        "--host",
        HOST,
        "--port",
        str(port),
    ]
    # An anonymous temp file, not a pipe: a chatty server can never block on a full pipe,
    # and its output is there to quote if it fails to start. Closing our end after start-up
    # is fine: the child keeps its own descriptor.
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        try:
            _wait_until_ready(process, url, ready_timeout_s, output)
        except BaseException:
            stop_tensorboard(process)
            raise
    return process, url


def _tail(output: IO[bytes]) -> str:
    output.seek(0)
    text = output.read().decode("utf-8", "replace")
    return text[-_LOG_TAIL_CHARS:].strip()


def _wait_until_ready(
    process: subprocess.Popen[bytes], url: str, timeout_s: float, output: IO[bytes]
) -> None:
    # Straight to localhost: an http_proxy in the environment must not see this request.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = _tail(output)
            if "already in use" in tail or "Address already in use" in tail:
                raise _PortTaken(f"port of {url} is already in use")
            raise TensorBoardFailed(
                f"TensorBoard exited with code {process.returncode} before it served {url}",
                hint=tail or None,
            )
        try:
            with opener.open(url + "data/environment", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.2)
    raise TensorBoardFailed(
        f"TensorBoard did not answer on {url} within {timeout_s:.0f} s",
        hint=_tail(output) or None,
    )
