"""Remote runs over TVM RPC on 127.0.0.1: a tracker with two servers, a run through it equal
to a host run, a sweep whose two cells run at once, a server killed mid-run, bad addresses.
The sweep, the killed server, tuning through the tracker and a tracker address where nothing
answers (a 10 s timeout) are slow."""

import datetime as dt
import json
import textwrap

import pytest
from rpcfarm import start_farm

from qbench.cli.main import main
from qbench.measure import timing

MODELS = textwrap.dedent("""
    import torch
    from torch import nn

    def build():
        torch.manual_seed(22)
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).eval(), (1, 3, 32, 32)

    def other():
        torch.manual_seed(7)
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)).eval(), (1, 3, 32, 32)
""")
TINY = ["--data", "synthetic", "--calib-size", "4", "--eval-size", "16", "--batch-size", "4"]
KEY = "cpu"  # the key of the two servers of this file's farm


@pytest.fixture(scope="module")
def farm():
    """This file's RPC farm on 127.0.0.1: a tracker and two servers under KEY, once the
    tracker lists both; stopped after the file's last test. (pytest-xdist's ``loadfile``
    runs the file on one worker: one farm per suite.)"""
    farm = start_farm({KEY: 2})
    try:
        yield farm
    finally:
        farm.stop()


@pytest.fixture
def models(tmp_path):
    (tmp_path / "tiny.py").write_text(MODELS)
    return tmp_path / "tiny.py"


def _folders(tmp_path, reports="rep"):
    return [
        "--cache-dir",
        str(tmp_path / "cal"),
        "--reports-dir",
        str(tmp_path / reports),
        "--tuning-db",
        str(tmp_path / "db"),
    ]


def _report(tmp_path, reports):
    (folder,) = (tmp_path / reports).glob("*-llvm")
    return json.loads((folder / "report.json").read_text()), (folder / "report.md").read_text()


def test_a_run_through_the_tracker_equals_a_host_run_and_names_the_device(tmp_path, farm, models):
    # the runs are judged on their logits, not their speed: a busy machine must not fail them
    model = ["--model", f"{models}:build", "--target", "llvm", *TINY, "--min-int8-speedup", "0"]
    assert main(["run", *model, *_folders(tmp_path, "here")]) == 0
    remote = ["--rpc-tracker", farm.tracker_addr, "--rpc-key", KEY]
    assert main(["run", *model, *_folders(tmp_path, "there"), *remote]) == 0
    here, _ = _report(tmp_path, "here")
    there, markdown = _report(tmp_path, "there")
    for name in ("tvm_fp32", "tvm_int8"):  # same code, same CPU: the same logits
        for key in ("top1_agreement", "sqnr_db", "cosine", "max_abs_diff"):
            assert there["results"][name]["metrics"][key] == here["results"][name]["metrics"][key]
    ports = {f"127.0.0.1:{port}" for port, _ in farm.servers}
    device = there["results"]["tvm_int8"]["device"]
    assert device.startswith(f"rpc key {KEY}, server ") and device.split(", ")[1][7:] in ports
    assert there["results"]["tvm_fp32"]["device"] == device
    assert there["results"]["pytorch_fp32"]["device"] == "host"
    assert here["results"]["tvm_int8"]["device"] == "host"
    assert there["environment"]["remote"]["device"] == device
    assert there["environment"]["remote"]["tracker"] == farm.tracker_addr
    assert device in markdown and f"TVM builds run on {device}, timed there" in markdown


@pytest.mark.slow  # two runs side by side: 14 s
def test_a_sweep_runs_its_two_cells_at_once_on_the_two_servers(tmp_path, farm, models):
    grid = ["--models", f"{models}:build,{models}:other", "--targets", "llvm", *TINY]
    remote = ["--rpc-tracker", farm.tracker_addr, "--rpc-key", KEY]
    assert main(["sweep", *grid, *_folders(tmp_path), *remote]) == 0
    (folder,) = (tmp_path / "rep").glob("*-sweep")
    summary = json.loads((folder / "summary.json").read_text())
    first, second = summary["cells"]
    assert summary["parallel"] == 2
    assert first["device"] != second["device"]  # one cell per server
    start = [dt.datetime.fromisoformat(c["started"]) for c in (first, second)]
    end = [
        s + dt.timedelta(seconds=c["wall_s"]) for s, c in zip(start, (first, second), strict=True)
    ]
    assert start[0] < end[1] and start[1] < end[0]  # their runs overlap in time
    assert first["device"] in (folder / "summary.md").read_text()


@pytest.mark.slow  # a farm of its own: 16 s
def test_a_server_killed_mid_run_exits_2_naming_it_and_writes_no_report(tmp_path, models, capsys):
    farm = start_farm()
    try:
        port = farm.add_server("doomed")

        def kill_then_settle():  # the timing's first step: the device dies as timing starts
            farm.kill_servers()
            return 0.0, True

        remote = ["--rpc-tracker", farm.tracker_addr, "--rpc-key", "doomed"]
        model = ["--model", f"{models}:build", "--target", "llvm", *TINY]
        with timing.replaced_rounds(timing.Rounds(0, 3, kill_then_settle)):
            assert main(["run", *model, *_folders(tmp_path), *remote]) == 2
    finally:
        farm.stop()
    err = capsys.readouterr().err
    assert f"remote device lost (rpc key doomed, server 127.0.0.1:{port}" in err
    reports = tmp_path / "rep"
    assert not reports.exists() or not any(reports.iterdir())


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--rpc-tracker", "127.0.0.1:9"], "--rpc-tracker needs --rpc-key"),
        (["--rpc-key", "cpu"], "--rpc-key needs --rpc-tracker"),
        (["--rpc", "nowhere"], "expected HOST:PORT"),
        (["--rpc", "127.0.0.1:1", "--rpc-tracker", "127.0.0.1:2"], "give one"),
        (["--rpc", "127.0.0.1:1"], "cannot open an RPC session"),
    ],
)
def test_bad_remote_options_exit_2_naming_the_option(tmp_path, models, flags, words, capsys):
    model = ["--model", f"{models}:build", "--target", "llvm", *TINY]
    assert main(["run", *model, *_folders(tmp_path), *flags]) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "rep").exists() or not list((tmp_path / "rep").iterdir())


def test_tuning_on_one_server_without_a_tracker_is_refused(tmp_path, models, capsys):
    model = ["--model", f"{models}:build", "--target", "llvm", *TINY]
    assert main(["tune", *model, *_folders(tmp_path), "--rpc", "127.0.0.1:9"]) == 2
    assert "tuning on a remote device needs a tracker" in capsys.readouterr().err
    assert main(["run", *model, *_folders(tmp_path), "--rpc", "127.0.0.1:9", "--tune"]) == 2
    assert "tuning on a remote device needs a tracker" in capsys.readouterr().err


@pytest.mark.slow  # tuning over RPC: 28 s
def test_tuning_through_the_tracker_measures_on_its_devices(tmp_path, farm, models, capsys):
    """MetaSchedule's RPC runner measures the candidates on the key's servers (the run's own
    session is ended first, so both servers are free to it), and the record check runs
    there too."""
    model = ["--model", f"{models}:build", "--target", "llvm", *TINY, "--trials", "2"]
    remote = ["--rpc-tracker", farm.tracker_addr, "--rpc-key", KEY]
    assert main(["tune", *model, *_folders(tmp_path), *remote]) == 0
    out = capsys.readouterr().out
    assert "tvm_fp32: 1 kernels tuned" in out and "tvm_int8:" in out
    (records,) = (tmp_path / "db").glob("*/database_tuning_record.json")
    assert records.read_text().count("\n") >= 2  # a measured record per tuned kernel


def test_an_unknown_key_lists_the_trackers_keys(tmp_path, farm, models, capsys):
    model = ["--model", f"{models}:build", "--target", "llvm", *TINY]
    remote = ["--rpc-tracker", farm.tracker_addr, "--rpc-key", "gpu"]
    assert main(["run", *model, *_folders(tmp_path), *remote]) == 2
    assert f"keys with servers: {KEY} (2)" in capsys.readouterr().err


@pytest.mark.slow  # waits out the handshake's 10 s timeout
def test_a_tracker_address_where_nothing_answers_exits_2(tmp_path, models, capsys):
    """A listener that accepts and never replies (an address of something else) is no
    tracker: exit 2 after the handshake's timeout, not a run that waits forever."""
    import socket

    from rpcfarm import free_port

    port = free_port()
    with socket.create_server(("127.0.0.1", port)):
        model = ["--model", f"{models}:build", "--target", "llvm", *TINY]
        remote = ["--rpc-tracker", f"127.0.0.1:{port}", "--rpc-key", KEY]
        assert main(["run", *model, *_folders(tmp_path), *remote]) == 2
    assert f"--rpc-tracker 127.0.0.1:{port}: no tracker answers (timed out)" in (
        capsys.readouterr().err
    )


def test_a_server_address_where_nothing_answers_exits_2(tmp_path, models, capsys, monkeypatch):
    """``--rpc`` at a listener that accepts and never replies (another service on the port):
    exit 2 once the handshake's timeout (here 2 s) is out, naming the address; before, TVM's
    own handshake, which has no timeout, hung the run."""
    import socket

    from rpcfarm import free_port

    from qbench.core import remote

    monkeypatch.setattr(remote, "HANDSHAKE_TIMEOUT_S", 2)
    port = free_port()
    with socket.create_server(("127.0.0.1", port)):
        model = ["--model", f"{models}:build", "--target", "llvm", *TINY]
        assert main(["run", *model, *_folders(tmp_path), "--rpc", f"127.0.0.1:{port}"]) == 2
    assert f"127.0.0.1:{port} took the connection but gave no TVM RPC handshake within 2 s" in (
        capsys.readouterr().err
    )
