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
    starting: dict = field(default_factory=dict)  # {key: ports} that start_farm started

    @property
    def tracker_addr(self):
        return f"127.0.0.1:{self.tracker_port}"

    def add_server(self, key, python=(sys.executable,), env=None, wait_s=60):
        """Start an RPC server registered under ``key``; wait until the tracker lists it."""
        (port,) = self.add_servers(key, 1, python, env, wait_s)
        return port

    def add_servers(self, key, count, python=(sys.executable,), env=None, wait_s=60):
        """Start ``count`` RPC servers under ``key`` at once (each process takes seconds to
        import TVM: they do so side by side); wait until the tracker lists them all.
        Returns their ports."""
        want = _registered(self, key) + count
        ports = self._start_servers(key, count, python, env)
        _wait(lambda: _registered(self, key) >= want, wait_s, f"servers {ports} under {key}")
        return ports

    def _start_servers(self, key, count, python=(sys.executable,), env=None):
        ports = []
        for _ in range(count):
            port = free_port()
            cmd = [*python, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1"]
            cmd += ["--port", str(port), "--port-end", str(port + 1)]
            cmd += ["--tracker", self.tracker_addr, "--key", key]
            self.servers.append((port, _start(cmd, env)))
            ports.append(port)
        return ports

    def wait_ready(self):
        """Wait until the tracker answers and lists the servers ``start_farm`` started."""
        _wait(lambda: _answers(self), 30, "the tracker")
        for key, ports in self.starting.items():
            want = len(ports)
            _wait(lambda k=key, n=want: _registered(self, k) >= n, 60, f"servers {ports}")

    def kill_servers(self):
        for _, proc in self.servers:
            _kill(proc)

    def stop(self):
        self.kill_servers()
        _kill(self.tracker)


def start_farm(servers=None):
    """A tracker on a free port, with ``servers`` ({key: count}, none by default) started
    beside it at once (a server retries until the tracker answers); returns when the
    tracker lists them all."""
    port = free_port()
    cmd = [sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1"]
    tracker = _start(cmd + ["--port", str(port), "--port-end", str(port + 1)])
    farm = Farm(port, tracker)
    try:
        farm.starting = {key: farm._start_servers(key, n) for key, n in (servers or {}).items()}
        farm.wait_ready()
    except BaseException:
        farm.stop()
        raise
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
