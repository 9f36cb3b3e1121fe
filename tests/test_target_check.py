"""Field case C31 (issue 35): a target dict is checked whole before any work. An ``mattr``
feature LLVM does not know (``+avx512_vnni``, as ``/proc/cpuinfo`` spells VNNI) was ignored
by LLVM with a warning, and ``qbench build`` exited 0 with libraries built without it. Every
expected value below is written by hand from LLVM 22's feature names."""

import json
import platform
import shutil
from pathlib import Path

import pytest

from qbench.cli.main import main
from qbench.compile import targetcheck, targets
from qbench.core.errors import UserError
from qbench.core.remote import Device

X86 = "x86_64-linux-gnu"
ARM = "aarch64-linux-gnu"
TINY_MODEL = Path(__file__).parent / "fixtures" / "tiny_model.py"
C31 = {"kind": "llvm", "mtriple": X86, "mcpu": "skylake-avx512", "mattr": ["+avx512_vnni"]}
# this machine links x86_64 libraries itself (``remote.export``); elsewhere it needs a
# cross compiler, which the target check asks for
LINKS_X86 = pytest.mark.skipif(
    platform.machine() != "x86_64" and not shutil.which(f"{X86}-gcc"),
    reason="links x86_64 libraries only on an x86_64 machine or with x86_64-linux-gnu-gcc",
)


def _refusal(target, device=None):
    """The message of the UserError ``parse_target`` raises for a build-only ``target``."""
    with pytest.raises(UserError) as e:
        targets.parse_target(json.dumps(target), 1, device=device, runs_here=False)
    return str(e.value)


@pytest.mark.parametrize(
    "feature, spelling",
    [("+avx512_vnni", "'+avx512vnni'"), ("+avx_vnni", "'+avxvnni'"), ("+sha_ni", "'+sha'")],
)
def test_a_cpuinfo_spelling_is_refused_naming_llvms(feature, spelling):
    """C31: a feature spelt as /proc/cpuinfo spells it is refused, naming the feature and
    LLVM's spelling (exact but for '_', or through features.py's alias table)."""
    message = _refusal({**C31, "mattr": [feature]})
    assert f"mattr feature '{feature}' is not a feature LLVM knows for {X86}" in message
    assert message.endswith(f"closest valid spelling: {spelling}")


def test_a_misspelt_feature_names_the_closest_ones():
    """C31: a feature with no spelling equal but for '_', '-', '.' gets difflib's closest
    names among the architecture's features; one close to none says so."""
    message = _refusal({**C31, "mattr": ["+avx512vnnii"]})
    assert "closest valid spellings: '+avx512vnni'" in message
    message = _refusal({**C31, "mattr": ["+zzzz"]})
    assert message.endswith("no x86_64 feature is spelt like it")


@pytest.mark.parametrize(
    "triple, feature, families, arch",
    [(X86, "+neon", "aarch64 and arm", "x86_64"), (ARM, "+avx2", "x86_64", "aarch64")],
)
def test_a_feature_of_another_architecture_is_refused(triple, feature, families, arch):
    """C31: a feature LLVM knows only for other CPU families is refused, naming them."""
    target = {"kind": "llvm", "mtriple": triple, "mattr": [feature]}
    message = _refusal(target)
    assert f"mattr feature '{feature}' is not a feature LLVM knows for {triple}" in message
    assert message.endswith(f"it is a feature of {families} CPUs, not of {arch}")


@pytest.mark.parametrize(
    "triple, mattr",
    [
        (X86, ["+avx512vnni", "+avxvnni", "-avx512f", "+amx-int8"]),
        # crypto, sve2-bitperm and v9.4a: valid names no CPU LLVM models has by default
        (ARM, ["+dotprod", "+i8mm", "-sve", "+crypto", "+sve2-bitperm", "+v9.4a"]),
    ],
)
def test_good_features_pass(triple, mattr):
    """C31: features LLVM knows for the triple pass, enabled or disabled."""
    targetcheck.check_mattr(mattr, triple, "t")


@LINKS_X86
def test_the_c31_target_spelt_as_llvm_spells_it_parses():
    """C31: the field target with LLVM's spelling of VNNI is taken as given."""
    target = {**C31, "mattr": ["+avx512vnni"]}
    assert targets.parse_target(json.dumps(target), 1, runs_here=False) == target


@pytest.mark.parametrize(
    "mattr, text",
    [
        (["avx2"], "mattr entry 'avx2' must start with '+' (enable) or '-' (disable)"),
        (["+avx2", "fma"], "mattr entry 'fma' must start with '+'"),
        ("+avx2,+fma", 'must be a list of "+feature" / "-feature" strings: ["+avx2", "+fma"]'),
        ({"avx2": True}, "must be a list of"),
        (["+avx2,+fma"], "mattr entry '+avx2,+fma' holds several features"),
        (["+avx2", "-avx2"], "mattr both enables and disables 'avx2'"),
    ],
)
def test_a_malformed_mattr_is_refused(mattr, text):
    """C31: an entry without '+' or '-' (LLVM would read it as a disable), a non-list
    mattr, several features in one entry and a feature both enabled and disabled."""
    assert text in _refusal({**C31, "mattr": mattr})


@pytest.mark.parametrize(
    "extra, text",
    [
        ({"mattrs": ["+avx2"]}, "unknown key 'mattrs' (did you mean 'mattr'?)"),
        ({"triple": X86}, "unknown key 'triple' (did you mean 'mtriple'?)"),
        ({"cl-opt": ["-foo"]}, "'cl-opt' is a TVM option qbench does not take"),
        ({"opt-level": 7}, "opt-level 7 must be 0, 1, 2 or 3"),
        ({"vector-width": 100}, "vector-width 100 must be a power of two from 64 to 2048"),
        ({"mfloat-abi": "softfp"}, 'mfloat-abi "softfp" must be "soft" or "hard"'),
    ],
)
def test_an_unknown_key_or_a_bad_value_is_refused(extra, text):
    """C31: every key of the dict is one qbench checks the value of; a near miss is named
    with the key meant."""
    message = _refusal({**C31, "mattr": ["+avx512vnni"], **extra})
    assert "not a valid llvm target: " + text in message


def test_an_unknown_cuda_key_is_refused():
    """C31: cuda dicts too: every key one qbench checks."""
    message = _refusal({"kind": "cuda", "arch": "sm_90", "max_thread": 1024})
    assert "not a valid cuda target: unknown key 'max_thread'" in message


@pytest.mark.parametrize(
    "triple, text",
    [
        ("bogus", " is not a target triple ARCH-[VENDOR-]OS[-ENV] in lower case"),
        ("X86_64-linux-gnu", " is not a target triple ARCH-[VENDOR-]OS[-ENV] in lower case"),
        ("x86-64-linux-gnu", ": LLVM knows no architecture 'x86' (closest: x86_64)"),
        ("nvptx64-nvidia-cuda", ": nvptx64 is not a CPU architecture"),
        ("aarch64-none-elf", " names no operating system a device loads libraries on"),
    ],
)
def test_a_bad_triple_is_refused_naming_valid_ones(triple, text):
    """C31: a malformed triple, an architecture LLVM has no CPU target for and a triple
    without an operating system are refused before LLVM sees them (an unknown triple
    crashes TVM's LLVM queries), naming valid triples."""
    message = _refusal({"kind": "llvm", "mtriple": triple})
    assert f"mtriple {triple!r}{text}" in message
    assert "valid examples: x86_64-linux-gnu, aarch64-linux-gnu" in message


@pytest.mark.parametrize(
    "device, triple, same",
    [
        ("aarch64-unknown-linux-gnu", "arm64-linux-gnu", True),
        ("armv7l-unknown-linux-gnueabihf", "armv7a-linux-gnueabihf", True),
        ("aarch64-linux-gnu", "x86_64-linux-gnu", False),
        ("aarch64-linux-gnu", "aarch64-linux-android", False),
    ],
)
def test_a_device_triple_is_checked_against_the_target(device, triple, same):
    """C31: a remote device's own triple against the target's: the same CPU family
    (arm64 is aarch64) and operating system, or refused naming both."""
    if same:
        targetcheck.check_device_triple(device, triple, "dev", "t")
        return
    with pytest.raises(UserError) as e:
        targetcheck.check_device_triple(device, triple, "dev", "t")
    assert f"dev runs {device}, not {triple}" in str(e.value)


@LINKS_X86
def test_a_remote_target_is_checked_whole_before_the_builds():
    """C31: through parse_target with a device: its triple and the mattr features."""
    device = Device(None, "rpc key arm, server 127.0.0.1:9", "aarch64-linux-gnu", "cortex-a72")
    message = _refusal({**C31, "mattr": ["+avx512vnni"]}, device)
    assert "rpc key arm, server 127.0.0.1:9 runs aarch64-linux-gnu, not x86_64" in message
    message = _refusal(C31, device)
    assert "closest valid spelling: '+avx512vnni'" in message


@pytest.mark.parametrize(
    "target, text",
    [
        (C31, "mattr feature '+avx512_vnni' is not a feature LLVM knows for x86_64-linux-gnu"),
        ({**C31, "mtriple": "x86-64-linux-gnu"}, "LLVM knows no architecture 'x86'"),
    ],
)
def test_qbench_build_refuses_the_c31_target_before_calibration(tmp_path, capsys, target, text):
    """C31: ``qbench build`` with the field target exits 2 before any stage (no
    "calibration" line), names the feature and LLVM's spelling, and writes nothing."""
    folders = ["--reports-dir", str(tmp_path / "rep"), "--cache-dir", str(tmp_path / "cal")]
    args = ["build", "--model", f"{TINY_MODEL}:build", "--data", "synthetic"]
    args += ["--calib-size", "2", "--target", json.dumps(target), *folders]
    assert main([*args, "--tuning-db", str(tmp_path / "db")]) == 2
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err
    assert "calibration" not in err and "[qbench]" not in err
    assert len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_key_given_twice_is_refused_naming_it():
    """JSON keeps the last of a repeated key without a word: a target dict giving ``mcpu``
    twice is refused naming it, not built for whichever came last."""
    text = '{"kind": "llvm", "mcpu": "znver4", "mcpu": "znver3"}'
    with pytest.raises(UserError, match="key 'mcpu' is given twice; give each key once"):
        targets.parse_target(text, 2)
