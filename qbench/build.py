"""Builds: compile a Relax module for a target (``targets``) and load it."""

import os


def build(mod, target, databases=(), schedules=None):
    """``compile`` ``mod`` and load it: a ``tvm.relax.VirtualMachine`` on the target's device."""
    from tvm import relax

    from .targets import device_for

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
