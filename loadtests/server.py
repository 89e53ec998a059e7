"""Start `python -m server` for a load test, wait until it is ready, and stop it with everything it started.

    with served(host="http://127.0.0.1:8011", server_args="--no-ray --model /tmp/tiny_ckpt", log=path):
        ...  # the server answers /readyz with 200 here

The server runs in a session of its own. Stopping sends SIGTERM to the server alone (it shuts Serve and Ray
down itself), then SIGKILL to what is left of its process group and session: Ray's workers sit in groups of
their own inside that session. The leader is reaped only after that, so its ids cannot be reused meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]


def start_group(command: list[str], log: Path) -> subprocess.Popen:
    """Start `command` in a new session, its stdout and stderr going to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        return subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def exited(process: subprocess.Popen) -> bool:
    """Whether the process has exited, without reaping it (its pid and group id stay reserved)."""
    return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def wait_exited(process: subprocess.Popen, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not exited(process):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def stop_group(process: subprocess.Popen, timeout_s: float = 60.0) -> int:
    """SIGTERM the server alone (it shuts Serve and Ray down itself), then after it exits or `timeout_s`
    SIGKILL whatever is left of its process group and session (Ray puts workers in groups of their own)."""
    if process.returncode is None:
        if not exited(process):
            os.kill(process.pid, signal.SIGTERM)  # not Popen.send_signal: it would reap the leader
        wait_exited(process, timeout_s)
        _signal_group(process, signal.SIGKILL)  # the leader is unreaped, so the group is still ours
        for pid in session_members(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return process.wait()


def session_members(session_id: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != session_id:
            with contextlib.suppress(OSError):
                if os.getsid(int(entry)) == session_id:
                    members.append(int(entry))
    return members


def _signal_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def server_command(host: str, server_args: str) -> list[str]:
    """`python -m server` with the given arguments, plus --host/--port from the URL where they are missing."""
    args = shlex.split(server_args)
    given = {arg.split("=", 1)[0] for arg in args}
    url = urlsplit(host)
    if url.port is None:
        raise ValueError(f"--host {host!r} needs a port to start a server on it")
    if "--host" not in given:
        args += ["--host", url.hostname]
    if "--port" not in given:
        args += ["--port", str(url.port)]
    return [sys.executable, "-m", "server", *args]


def wait_ready(host: str, process: subprocess.Popen, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if exited(process):
            raise RuntimeError(f"the server exited before it was ready; its log ({log}) ends:\n{tail(log)}")
        try:
            with urllib.request.urlopen(f"{host.rstrip('/')}/readyz", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the server was not ready at {host}/readyz after {timeout_s:.0f} s; see {log}")


@contextmanager
def served(host: str, server_args: str, log: Path, ready_timeout_s: float = 180.0, stop_timeout_s: float = 30.0):
    address = urlsplit(host)
    with contextlib.suppress(OSError), socket.create_connection((address.hostname, address.port), timeout=2):
        # it would answer /readyz before the new server had found its port taken: a run measuring the wrong one
        raise RuntimeError(f"something already listens at {host}: stop it or choose another port")
    command = server_command(host, server_args)
    print(f"starting server: {shlex.join(command)} (log: {log})", flush=True)
    process = start_group(command, log)
    try:
        wait_ready(host, process, log, ready_timeout_s)
        yield process
    finally:
        code = stop_group(process, stop_timeout_s)
        # Ray's workers (a replica serving the port itself among them) live in sessions of their own: killed with
        # the driver's, they exit when they notice, seconds to tens of seconds later. A next run needs the port.
        released = port_released(address.hostname, address.port, stop_timeout_s)
        print(f"server stopped (exit code {code}){'' if released else f'; {host} still answers'}", flush=True)


def port_released(hostname: str, port: int, timeout_s: float) -> bool:
    """Whether nothing listens at hostname:port any more, within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((hostname, port), timeout=1).close()
        except OSError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
