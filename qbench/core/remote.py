"""Remote devices over TVM's RPC: one server, or a tracker's pool of servers under a key.

A team's devices run TVM's own RPC servers (``python -m tvm.exec.rpc_server --tracker
HOST:PORT --key KEY``) registered with its tracker (``python -m tvm.exec.rpc_tracker``);
qbench asks the tracker for a free server of the key (the tracker queues the request until
one is free), compiles on the host, uploads the library and runs it there. Transport,
queueing and sessions are TVM's (``tvm.rpc``); this module only names the device that ran a
build and turns a lost connection into a ``UserError`` that says which device was lost.
"""

import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError

CONNECT_TIMEOUT_S = 10  # how long a server or tracker that refuses connections is retried, s
HANDSHAKE_TIMEOUT_S = 60  # how long a peer that took the connection may take to answer, s


class RemoteLost(UserError):
    """A remote device stopped answering mid-run (server killed, connection dropped)."""


@dataclass(frozen=True)
class Remote:
    """Where the TVM runners run: one RPC server, or any free server of a tracker's key.

    Attributes:
        server: (host, port) of an RPC server (``--rpc``), or None.
        tracker: (host, port) of an RPC tracker (``--rpc-tracker``), or None.
        key: the device key asked of the tracker (``--rpc-key``), or None.
    """

    server: tuple = None
    tracker: tuple = None
    key: str = None

    def words(self):
        """``tracker 10.0.0.5:9190, key rasp4`` or ``server 10.0.0.7:9090``."""
        if self.tracker:
            return f"tracker {_hostport(self.tracker)}, key {self.key}"
        return f"server {_hostport(self.server)}"

    def to_json(self):
        return {
            "server": _hostport(self.server) if self.server else None,
            "tracker": _hostport(self.tracker) if self.tracker else None,
            "key": self.key,
        }


def parse_remote(rpc=None, tracker=None, key=None):
    """``--rpc``, ``--rpc-tracker`` and ``--rpc-key`` -> ``Remote``, or None (run here).

    Raises:
        UserError: a malformed HOST:PORT, ``--rpc`` with ``--rpc-tracker``, a tracker
            without a key, or a key without a tracker.
    """
    if rpc and tracker:
        raise UserError("--rpc and --rpc-tracker: give one (a server, or a tracker and a key)")
    if tracker and not key:
        raise UserError("--rpc-tracker needs --rpc-key KEY: the device key its servers hold")
    if key and not tracker:
        raise UserError("--rpc-key needs --rpc-tracker HOST:PORT")
    if rpc:
        return Remote(server=_address(rpc, "--rpc"))
    if tracker:
        return Remote(tracker=_address(tracker, "--rpc-tracker"), key=key)
    return None


def _address(text, flag):
    host, _, port = str(text).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"{flag} {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9190")
    return host, int(port)


def _hostport(addr):
    return f"{addr[0]}:{addr[1]}"


@dataclass
class Device:
    """A session with one remote device.

    Attributes:
        session: the ``tvm.rpc.RPCSession``.
        name: the device in words, as reports name it: ``rpc key cpu-a, server
            127.0.0.1:9091, x86_64-linux-gnu znver5``.
        triple: the server's LLVM target triple (``aarch64-linux-gnu``).
        cpu: the server's LLVM CPU name (``neoverse-n1``), as ``mcpu`` takes it.
    """

    session: object
    name: str
    triple: str
    cpu: str

    def tvm_device(self):
        """The remote CPU (``tvm.runtime.Device`` through the session)."""
        return self.session.cpu(0)

    def close(self):
        """End the session (the tracker hands the device to the next request), once nothing
        built on it is left."""
        self.session = None

    def lost(self, error):
        """The ``RemoteLost`` error for ``error`` (a TVM or socket error) on this device."""
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error)
        return RemoteLost(f"remote device lost ({self.name}): {first}")


def connect(remote):
    """Open a session on ``remote``'s server, or on a free server of its tracker's key (the
    call waits while all of them are busy). Returns a ``Device``.

    Raises:
        UserError: nothing listens at the address, it is no tracker or server, or the
            tracker has no server under the key (the message lists the keys it has).
    """
    from tvm import rpc

    try:
        if remote.tracker:
            server = _tracked_server(remote)
            where, addr = f"rpc key {remote.key}", server[:2]
        else:
            server = remote.server
            where, addr = "rpc", remote.server
        session, (triple, cpu) = _within(HANDSHAKE_TIMEOUT_S, _open, rpc, server, addr)
    except (OSError, RuntimeError) as e:
        hint = ""
        if remote.server and "matches key" in str(e):
            hint = "; the server is registered with a tracker: use --rpc-tracker and --rpc-key"
        raise UserError(f"{remote.words()}: cannot open an RPC session ({e}){hint}") from e
    return Device(session, f"{where}, server {_hostport(addr)}, {triple} {cpu}", triple, cpu)


def _open(rpc, server, addr):
    """A session on ``server`` ((host, port) or (host, port, match key)) and its
    ``_llvm_host``; ``addr`` names it in the error of a peer that never answers."""
    session = rpc.connect(*server, session_timeout=0)
    return session, _llvm_host(session)


def _within(seconds, fn, *args):
    """``fn(*args)`` run in a daemon thread, or ``TimeoutError`` after ``seconds``: TVM's
    RPC handshake has no timeout of its own, and a peer that accepts the connection but
    never answers (another service on the port) would hang the run. The thread is left
    behind blocked; the run ends with the error."""
    done = {}

    def run():
        try:
            done["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            done["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(
            f"{_hostport(args[-1])} took the connection but gave no TVM RPC handshake within "
            f"{seconds} s (another service on that port?)"
        )
    if "error" in done:
        raise done["error"]
    return done["value"]


def _tracked_server(remote):
    """(host, port, match key) of a free server of ``remote.key``, by TVM's tracker
    protocol (``tvm.rpc.base.TrackerCode``): the one ``TrackerSession.request`` speaks,
    asked directly so that the report can name the server."""
    from tvm.rpc import base

    keys = tracker_keys(remote.tracker)
    if remote.key not in keys:
        have = ", ".join(f"{k} ({n['servers']})" for k, n in sorted(keys.items())) or "none"
        raise UserError(
            f"--rpc-key {remote.key}: the tracker at {_hostport(remote.tracker)} has no server "
            f"under that key; keys with servers: {have}"
        )
    sock = _tracker_socket(remote.tracker)
    sock.settimeout(None)  # the tracker answers when a device of the key is free
    try:
        base.sendjson(sock, [base.TrackerCode.REQUEST, remote.key, "", 1])
        code, value = base.recvjson(sock)
    finally:
        sock.close()
    if code != base.TrackerCode.SUCCESS:
        raise RuntimeError(f"tracker refused the request: {value}")
    return tuple(value)


def tracker_keys(tracker):
    """{device key: {"servers": registered, "free": not in a session}} of the tracker at
    (host, port); keys without a server are left out.

    Raises:
        UserError: nothing listens there, or it is no TVM RPC tracker.
    """
    from tvm.rpc import base

    try:
        sock = _tracker_socket(tracker)
        try:
            base.sendjson(sock, [base.TrackerCode.SUMMARY])
            code, summary = base.recvjson(sock)
        finally:
            sock.close()
    except (OSError, RuntimeError) as e:
        raise UserError(f"--rpc-tracker {_hostport(tracker)}: no tracker answers ({e})") from e
    keys = {}
    for server in summary["server_info"]:
        key = server["key"].split(":", 1)[-1]  # registered as "server:KEY"
        keys.setdefault(key, {"servers": 0, "free": 0})["servers"] += 1
    for key, queue in summary["queue_info"].items():
        if key in keys:
            keys[key]["free"] = int(queue["free"])
    return keys


def _tracker_socket(tracker):
    import struct

    from tvm.rpc import base

    sock = base.connect_with_retry(tracker, timeout=CONNECT_TIMEOUT_S, retry_period=1)
    sock.settimeout(CONNECT_TIMEOUT_S)  # a peer that never answers is no tracker
    sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
    if struct.unpack("<i", base.recvall(sock, 4))[0] != base.RPC_TRACKER_MAGIC:
        sock.close()
        raise RuntimeError("the peer is not a TVM RPC tracker")
    return sock


def _llvm_host(session):
    """(triple, cpu) the remote TVM's LLVM reports for its own machine."""
    triple = session.get_function("target.llvm_get_system_triple")()
    cpu = session.get_function("target.llvm_get_system_cpu")()
    # the wheels report their build triple (x86_64-conda-linux-gnu): name the machine plainly
    return str(triple).replace("-conda-", "-"), str(cpu)


def remote_target(device, threads):
    """The llvm target dict of ``device``'s CPU, as ``targets.Llvm.host`` gives this one's."""
    return {"kind": "llvm", "mtriple": device.triple, "mcpu": device.cpu, "num-cores": threads}


def upload(device, executable, name):
    """Export ``executable`` (a ``relax.VMExecutable`` built for ``device``), upload it and
    load it there. Returns the remote module.

    Raises:
        RemoteLost: the device stopped answering.
    """
    # a fresh file name for each upload: overwriting a library the server has loaded
    # crashes it (seen: the session ends with kShutdown)
    with tempfile.TemporaryDirectory(prefix="qbench-rpc-") as tmp:
        path = Path(tmp) / f"{name}-{uuid.uuid4().hex[:12]}.so"
        export(executable, path, device.triple)
        try:
            device.session.upload(str(path))
            return device.session.load_module(path.name)
        except (OSError, RuntimeError) as e:
            raise device.lost(e) from e


def export(executable, path, triple):
    """``executable.export_library(path)``, linked by the cross compiler of ``triple``
    (``<triple>-gcc``, e.g. Debian's ``aarch64-linux-gnu-gcc``) when it is not this machine's.

    Raises:
        UserError: the cross compiler is not on PATH.
    """
    import platform

    from tvm.support import cc

    if triple.startswith(platform.machine()):
        executable.export_library(str(path))
        return
    compiler = f"{triple}-gcc"
    if shutil.which(compiler) is None:
        raise UserError(
            f"target triple {triple}: linking its library needs the cross compiler {compiler} "
            f"on PATH (Debian: apt-get install gcc-{triple})"
        )
    executable.export_library(str(path), fcompile=cc.cross_compiler(compiler))
