"""Targets: one class per TVM target kind, owning what qbench does differently per kind.

A target travels through qbench as a plain dict (``{"kind": "llvm", "mcpu": ...}``), the form
``tvm.target.Target`` takes; ``kind_of(target)`` gives the class that knows how to check it,
its device, its CPU features and its lowering pipeline. Adding a target kind is one class
here and one entry in ``KINDS``.
"""

import json
import re

from ..core.errors import UserError
from . import targetcheck
from .features import AMX_FEATURES, SYSTEM_FEATURES, amx_ready, host_lacks
from .kernels.gpu import TARGET_DEFAULTS


class Llvm:
    """CPUs through LLVM: the host (``llvm``), or a JSON dict naming an ``mcpu``."""

    name = "llvm"
    # LLVM CPU features that tune code generation but add no instruction a CPU may lack
    TUNING_PREFIXES = (
        "fast-",
        "slow-",
        "tuning-",
        "prefer-",
        "false-deps-",
        "idiv",
        "lea-",
        "macrofusion",
        "branchfusion",
        "pad-short",
        "sbb-dep",
        "use-",
        "allow-",
        "vzeroupper",
        "64bit-mode",
        "no-",
        "ermsb",
        "faster-",
        "fsrm",
    )

    @staticmethod
    def host(threads):
        """The llvm target dict for this CPU: explicit triple and ``mcpu`` (``-mcpu=native``
        is ignored by the wheel's default triple, see DESIGN.md) and ``num-cores``; with
        ``mattr`` ``+amx-tile,+amx-int8`` when the CPU has AMX tiles and this process may use
        them (``features.amx_ready``) but LLVM's model of the ``mcpu`` lacks them (an Intel
        Xeon VM with AMX is ``rocketlake`` to LLVM 22)."""
        import platform

        import tvm
        from tvm.target import codegen

        # The wheel reports its build triple (x86_64-conda-linux-gnu); name the host's plainly.
        machine = platform.machine()
        triple = "x86_64-linux-gnu" if machine == "x86_64" else codegen.llvm_get_system_triple()
        target = {
            "kind": "llvm",
            "mtriple": triple,
            "mcpu": codegen.llvm_get_system_cpu(),
            "num-cores": int(threads),
        }
        if amx_ready():
            modelled = set(codegen.llvm_get_cpu_features(tvm.target.Target(target)))
            if not set(AMX_FEATURES) <= modelled:
                target["mattr"] = ["+" + f for f in AMX_FEATURES]
        return target

    @staticmethod
    def check(target, text, runs_here=True):
        """Refuse llvm targets this machine cannot build for (UserError), the whole dict
        before any work (``targetcheck``): a key qbench does not check, a value of the wrong
        type, an ``mtriple`` no device loads, an ``mcpu`` or ``mattr`` feature LLVM does not
        know (LLVM would ignore it); a foreign triple this machine cannot link; and, when the
        build is to run here (``runs_here``), another architecture or OS, and any
        instruction set the target's code may use that this CPU lacks (it would die of
        SIGILL)."""
        import platform

        import tvm
        from tvm.target import codegen

        targetcheck.check_keys(target, "llvm", text)
        targetcheck.check_llvm_values(target, text)
        if "mtriple" in target:
            targetcheck.check_triple(target["mtriple"], text)
        # TVM's default triple is LLVM's system triple; the names are checked before a
        # TVM target is made of them (its Arm parser hands mattr to LLVM, which warns)
        triple = str(target.get("mtriple") or codegen.llvm_get_system_triple())
        if "mcpu" in target:
            targetcheck.check_cpu(target["mcpu"], triple, text)
        targetcheck.check_mattr(target.get("mattr", []), triple, text)
        try:
            tvm_target = tvm.target.Target(target)
        except Exception as e:  # noqa: BLE001  (TVM raises ValueError, TypeError, ...)
            raise UserError(f"--target {text}: not a valid llvm target ({e})") from e
        if not runs_here:
            targetcheck.check_linker(triple, text)
            return target
        machine, system = platform.machine(), platform.system().lower()
        if not triple.startswith(machine) or system not in triple:
            raise UserError(
                f"--target {text}: mtriple {triple} cannot run on this {machine} {system} "
                "machine; run it on such a device (--rpc HOST:PORT, or --rpc-tracker HOST:PORT "
                "--rpc-key KEY), or build it only (qbench build)"
            )
        missing = Llvm._missing_features(tvm_target)
        if "64bit" in missing:
            raise UserError(f"--target {text}: mcpu {target.get('mcpu')!r} is a 32-bit CPU")
        if missing:
            raise UserError(
                f"--target {text}: this CPU ({codegen.llvm_get_system_cpu()}) lacks "
                f"{', '.join(missing)}, which code for that target uses (it would die of an "
                "illegal instruction); run it on such a device (--rpc, --rpc-tracker), build "
                "it only (qbench build), or leave them out of the target: "
                f'"mattr": {json.dumps(["-" + f for f in missing])}'
            )
        return target

    @staticmethod
    def _missing_features(tvm_target):
        """The instruction-set features of ``tvm_target`` this CPU lacks, sorted; ``64bit``
        when this CPU is 64-bit and the target's ``mcpu`` is not. The host's features are
        its own (``features.host_lacks``: /proc/cpuinfo, AMX only once granted), or LLVM's
        model of its ``mcpu`` where the CPU cannot be read; features of instructions that
        generated code never holds (``features.SYSTEM_FEATURES``) are not asked for."""
        import tvm
        from tvm.target import codegen

        modelled = set(codegen.llvm_get_cpu_features(tvm.target.Target(Llvm.host(1))))
        wanted = {
            f
            for f in codegen.llvm_get_cpu_features(tvm_target)
            if not f.startswith(Llvm.TUNING_PREFIXES) and f not in SYSTEM_FEATURES
        }
        lacking = host_lacks(wanted)
        missing = set(wanted - modelled if lacking is None else lacking)
        if "64bit" in modelled and "64bit" not in wanted:
            missing.add("64bit")
        return sorted(missing)

    @staticmethod
    def device():
        import tvm

        return tvm.cpu(0)

    @staticmethod
    def pipeline(target, database, fallback, hand_kernels):
        """``lowering.cpu_pipeline``: qbench's kernels, the database, default schedules."""
        from .lowering import cpu_pipeline

        return cpu_pipeline(target, database, fallback, hand_kernels)


class Cuda:
    """NVIDIA GPUs: ``cuda``, the arch read from GPU 0."""

    name = "cuda"

    @staticmethod
    def host(_threads):
        return {"kind": "cuda", "arch": Cuda.arch(), **TARGET_DEFAULTS}

    @staticmethod
    def arch():
        import tvm

        dev = tvm.cuda(0)
        if not dev.exist:
            raise UserError(
                "--target cuda: no CUDA device visible on this machine; valid here: "
                "--target llvm (this CPU), a JSON llvm target dict for another CPU class, or "
                "a build only for a named GPU arch: qbench build --target "
                '\'{"kind": "cuda", "arch": "sm_90"}\''
            )
        return "sm_" + dev.compute_version.replace(".", "")

    @staticmethod
    def check(target, text, runs_here=True):
        """A cuda dict of the keys qbench checks (``targetcheck.CUDA_KEYS``) with its
        ``arch`` (read from GPU 0 when not given; a build-only target must give it) and the
        thread and shared-memory limits MetaSchedule's rules
        read (``kernels.gpu.TARGET_DEFAULTS`` where not given)."""
        targetcheck.check_keys(target, "cuda", text)
        for key in targetcheck.CUDA_INT_KEYS:
            value = target.get(key, 1)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(
                    f"--target {text}: not a valid cuda target: {key} must be a whole number >= 1"
                )
        if "arch" not in target:
            target["arch"] = Cuda.arch()
        if not re.fullmatch(r"sm_\d{2,3}[a-z]?", str(target["arch"])):
            raise UserError(
                f"--target {text}: arch {target['arch']!r} is no NVIDIA compute capability; "
                "valid: sm_XY, e.g. sm_61, sm_80, sm_90"
            )
        for key, value in TARGET_DEFAULTS.items():
            target.setdefault(key, value)
        if runs_here:
            Cuda.arch()  # a GPU must be present to run the build
        return target

    @staticmethod
    def device():
        import tvm

        return tvm.cuda(0)

    @staticmethod
    def pipeline(target, database, _fallback, _hand_kernels):
        """TVM's zero pipeline (legalize, fuse), the database's schedules, then dlight's
        default GPU schedules for the rest (``kernels.gpu``)."""
        import tvm
        from tvm import relax

        from .kernels.gpu import LAYOUT, default_schedule, dp4a_schedule

        @tvm.transform.module_pass(opt_level=0)
        def _gpu(mod, _ctx):
            tvm_target = tvm.target.Target(target)
            passes = [relax.transform.ConvertLayout(LAYOUT), relax.get_pipeline("zero")]
            if database is not None:
                passes.append(relax.transform.MetaScheduleApplyDatabase())
            passes += [dp4a_schedule(tvm_target), default_schedule()]
            with tvm_target:
                if database is None:
                    return tvm.transform.Sequential(passes)(mod)
                with database:
                    return tvm.transform.Sequential(passes)(mod)

        return _gpu


KINDS = {kind.name: kind for kind in (Llvm, Cuda)}


def kind_of(target):
    """The class of a target dict's kind (``Llvm``, ``Cuda``)."""
    return KINDS[target["kind"]]


def parse_target(text, threads, device=None, runs_here=True):
    """``--target`` text -> TVM target dict.

    Args:
        text: a kind name (``llvm``: the CPU that runs the build, detected; ``cuda``), or a
            JSON target dict such as ``{"kind": "llvm", "mcpu": "skylake-avx512"}``.
        threads: CPU thread count, recorded as ``num-cores`` for llvm.
        device: the ``remote.Device`` that runs the build, or None.
        runs_here: False for a build that runs on ``device`` or nowhere (``qbench build``):
            the target need not suit this machine's CPU.

    Raises:
        UserError: unknown kind or invalid JSON (the message lists the valid forms); a
            target this machine cannot run when ``runs_here``; a remote target whose
            architecture is not ``device``'s.
    """
    if device is not None:
        return _remote_target(text, threads, device)
    if text in KINDS:
        return KINDS[text].host(threads)
    if text.lstrip().startswith("{"):
        try:
            target = json.loads(text, object_pairs_hook=_unique_keys)
        except json.JSONDecodeError as e:
            raise UserError(f"--target {text}: invalid JSON ({e})") from e
        except ValueError as e:
            raise UserError(f"--target {text}: {e}; give each key once") from e
        kind = target.get("kind") if isinstance(target, dict) else None
        if kind not in KINDS:
            raise UserError(f"--target {text}: kind must be one of {tuple(KINDS)}")
        return KINDS[kind].check(target, text, runs_here)
    raise UserError(
        f"--target {text!r}: unknown; valid: {', '.join(KINDS)}, or a JSON target dict "
        '(e.g. \'{"kind": "llvm", "mcpu": "znver4"}\')'
    )


def _unique_keys(pairs):
    """A JSON object's dict, refusing a key given twice (``json.loads`` would keep the last
    silently): ``ValueError`` naming the key."""
    keys = [k for k, _ in pairs]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"key {twice[0]!r} is given twice")
    return dict(pairs)


def _remote_target(text, threads, device):
    """The llvm target of a build that runs on the remote ``device`` (``remote.Device``)."""
    from ..core.remote import remote_target

    if text == "llvm":
        return remote_target(device, threads)
    target = parse_target(text, threads, runs_here=False)
    if target["kind"] != "llvm" or "mtriple" not in target:
        raise UserError(
            f"--target {text}: {device.name} runs {device.triple}; give --target llvm (its "
            f"own CPU) or an llvm dict with an mtriple of {device.triple.split('-')[0]}"
        )
    targetcheck.check_device_triple(device.triple, target["mtriple"], device.name, text)
    return target


def device_for(target):
    """The TVM device of a target dict (CPU for llvm, GPU 0 for cuda)."""
    return kind_of(target).device()
