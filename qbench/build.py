"""Targets and builds: parse ``--target``, compile a Relax module, pick the device."""

import json
import os

from .errors import UserError

TARGET_KINDS = ("llvm", "cuda")


def host_llvm_target(threads):
    """The llvm target dict for this CPU: explicit triple and ``mcpu`` (``-mcpu=native`` is ignored
    by the wheel's default triple, see DESIGN.md) and ``num-cores``."""
    import platform

    from tvm.target import codegen

    # The wheel reports its build triple (x86_64-conda-linux-gnu); name the host's plainly.
    triple = (
        "x86_64-linux-gnu" if platform.machine() == "x86_64" else codegen.llvm_get_system_triple()
    )
    return {
        "kind": "llvm",
        "mtriple": triple,
        "mcpu": codegen.llvm_get_system_cpu(),
        "num-cores": int(threads),
    }


def parse_target(text, threads):
    """``--target`` text -> TVM target dict.

    Args:
        text: ``llvm`` (host CPU detected), ``cuda``, or a JSON target dict such as
            ``{"kind": "llvm", "mcpu": "skylake-avx512"}``.
        threads: CPU thread count, recorded as ``num-cores`` for llvm.

    Raises:
        UserError: unknown kind or invalid JSON; the message lists the valid forms.
    """
    if text == "llvm":
        return host_llvm_target(threads)
    if text == "cuda":
        return {"kind": "cuda", "arch": _cuda_arch()}
    if text.lstrip().startswith("{"):
        try:
            target = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"--target {text}: invalid JSON ({e})") from e
        return _check_target_dict(target, text)
    raise UserError(
        f"--target {text!r}: unknown; valid: llvm, cuda, or a JSON target dict "
        '(e.g. \'{"kind": "llvm", "mcpu": "znver4"}\')'
    )


def _check_target_dict(target, text):
    """Refuse JSON targets this machine cannot build for and run."""
    import platform

    from tvm.target import codegen

    kind = target.get("kind") if isinstance(target, dict) else None
    if kind not in TARGET_KINDS:
        raise UserError(f"--target {text}: kind must be one of {TARGET_KINDS}")
    if kind == "cuda":
        target.setdefault("arch", _cuda_arch())
        return target
    triple = target.get("mtriple", codegen.llvm_get_system_triple())
    if not triple.startswith(platform.machine()):
        raise UserError(
            f"--target {text}: mtriple {triple} cannot run on this "
            f"{platform.machine()} machine (remote targets are not supported yet)"
        )
    if "mcpu" in target and not codegen.llvm_is_valid_cpu(target["mcpu"], triple):
        raise UserError(
            f"--target {text}: mcpu {target['mcpu']!r} unknown to LLVM for "
            f"{triple}; this machine is {codegen.llvm_get_system_cpu()!r}"
        )
    return target


def _cuda_arch():
    import tvm

    dev = tvm.cuda(0)
    if not dev.exist:
        raise UserError("--target cuda: no CUDA device visible on this machine")
    return "sm_" + dev.compute_version.replace(".", "")


def device_for(target):
    """The TVM device of a target dict (CPU for llvm, GPU 0 for cuda)."""
    import tvm

    return tvm.cuda(0) if target["kind"] == "cuda" else tvm.cpu(0)


def build(mod, target, databases=(), schedules=None):
    """``compile`` ``mod`` and load it: a ``tvm.relax.VirtualMachine`` on the target's device."""
    from tvm import relax

    executable = compile(mod, target, databases, schedules)
    return relax.VirtualMachine(executable, device_for(target))


def compile(mod, target, databases=(), schedules=None, hand_kernels=True):  # noqa: A001
    """Compile ``mod`` for ``target``.

    On llvm: ``lowering.cpu_pipeline`` (qbench's hand-scheduled kernels, then the tuning
    databases' best schedules, then default parallel schedules for the rest). On cuda: TVM's
    default Relax pipeline, which applies dlight's default GPU schedules, after the database.

    Args:
        mod: Relax ``tvm.IRModule``.
        target: TVM target dict.
        databases: MetaSchedule database folders (``tuning.databases``) applied first.
        schedules: optional dict, filled on llvm with the kernel counts by schedule source
            (``hand``, ``tuned``, ``default``; see ``lowering.cpu_pipeline``).
        hand_kernels: False compiles TVM's own ops only on llvm (no ``kernels.select``):
            the reference qbench's kernels are checked against.

    Returns:
        the ``tvm.relax.VMExecutable``.
    """
    import tvm
    from tvm import relax

    from .lowering import SCHEDULE_COUNTS
    from .tuning import apply

    lowered = apply(mod, target, databases, hand_kernels)
    counts = lowered.attrs.get(SCHEDULE_COUNTS) if lowered.attrs is not None else None
    if schedules is not None and counts is not None:
        schedules.update({k: int(v) for k, v in counts.items()})
    return relax.build(lowered, tvm.target.Target(target))


def assembly(executable):
    """The generated assembly text of every compiled kernel library in ``executable``."""
    return "\n".join(m.inspect_source("asm") for m in executable.mod._collect_dso_modules())


def set_threads(threads):
    """Use ``threads`` CPU threads in TVM and PyTorch (call before TVM's runtime starts)."""
    os.environ["TVM_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
