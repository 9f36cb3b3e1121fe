"""A TVM RPC tracker and servers on 127.0.0.1, started as the processes a team would run
(``python -m tvm.exec.rpc_tracker``, ``python -m tvm.exec.rpc_server``), and stopped."""

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from qbench.core.remote import tracker_keys


def free_port():
    """A TCP port free on 127.0.0.1 now, with the next one (TVM takes ``--port-end``)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port


@dataclass
class Farm:
    """The tracker's port and one (port, process) per server."""

    tracker_port: int
    tracker: subprocess.Popen
    servers: list = field(default_factory=list)

    @property
    def tracker_addr(self):
        return f"127.0.0.1:{self.tracker_port}"

    def add_server(self, key, python=(sys.executable,), env=None, wait_s=60):
        """Start an RPC server registered under ``key``; wait until the tracker lists it."""
        port = free_port()
        cmd = [*python, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1"]
        cmd += ["--port", str(port), "--port-end", str(port + 1)]
        cmd += ["--tracker", self.tracker_addr, "--key", key]
        want = _registered(self, key) + 1
        proc = _start(cmd, env)
        self.servers.append((port, proc))
        _wait(lambda: _registered(self, key) >= want, wait_s, f"server {port} under {key}")
        return port

    def kill_servers(self):
        for _, proc in self.servers:
            _kill(proc)

    def stop(self):
        self.kill_servers()
        _kill(self.tracker)


def start_farm():
    """A tracker on a free port, no servers yet."""
    port = free_port()
    cmd = [sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1"]
    tracker = _start(cmd + ["--port", str(port), "--port-end", str(port + 1)])
    farm = Farm(port, tracker)
    _wait(lambda: _answers(farm), 30, "the tracker")
    return farm


def _start(cmd, env=None):
    return subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: its children die with it
        env={**os.environ, **(env or {})},
    )


def _kill(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _answers(farm):
    try:
        tracker_keys(("127.0.0.1", farm.tracker_port))
        return True
    except Exception:  # noqa: BLE001 - not up yet
        return False


def _registered(farm, key):
    return tracker_keys(("127.0.0.1", farm.tracker_port)).get(key, {"free": 0})["free"]


def _wait(ready, seconds, what):
    deadline = time.time() + seconds
    while not ready():
        if time.time() > deadline:
            raise TimeoutError(f"{what} did not come up in {seconds} s")
        time.sleep(0.2)
