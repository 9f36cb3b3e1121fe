"""Builds: compile a Relax module for a target (``targets``) and load it."""

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Built:
    """A build loaded on its device.

    Fields:
        vm: the ``tvm.relax.VirtualMachine`` on the target's device.
        schedule_counts: {schedule source: kernel count} on llvm (``hand``, ``tuned``,
            ``default``; see ``lowering.cpu_pipeline``); {} on other targets.
    """

    vm: object
    schedule_counts: dict


def build(mod, target, databases=(), remote=None, name="model"):
    """Compile ``mod`` as ``compile`` does and load it: here, or on the ``remote.Device``
    ``remote`` (exported as ``<name>.so`` and uploaded). Returns a ``Built``.

    Raises:
        remote.RemoteLost: the remote device stopped answering.
    """
    import tvm
    from tvm import relax

    from ..core.remote import upload
    from .targets import device_for

    lowered = lower(mod, target, databases)
    executable = relax.build(lowered, tvm.target.Target(target))
    if remote is None:
        vm = relax.VirtualMachine(executable, device_for(target))
    else:
        vm = relax.VirtualMachine(upload(remote, executable, name), remote.tvm_device())
    return Built(vm, schedule_counts(lowered))


def compile(mod, target, databases=(), hand_kernels=True):  # noqa: A001
    """Compile ``mod`` for ``target`` (see ``lower``). Returns the ``tvm.relax.VMExecutable``."""
    import tvm
    from tvm import relax

    return relax.build(lower(mod, target, databases, hand_kernels), tvm.target.Target(target))


def lower(mod, target, databases=(), hand_kernels=True):
    """Lower ``mod`` for ``target``, ready for ``relax.build``.

    On llvm: ``lowering.cpu_pipeline`` (qbench's hand-scheduled kernels, then the tuning
    databases' best schedules, then default parallel schedules for the rest). On cuda: TVM's
    default Relax pipeline, which applies dlight's default GPU schedules, after the database.

    Args:
        mod: Relax ``tvm.IRModule``.
        target: TVM target dict.
        databases: MetaSchedule database folders (``tuning.databases``) applied first.
        hand_kernels: False compiles TVM's own ops only on llvm (no ``kernels.select``):
            the reference qbench's kernels are checked against.

    Returns:
        the lowered ``tvm.IRModule``.
    """
    from .tuning import apply

    return apply(mod, target, databases, hand_kernels)


def schedule_counts(lowered):
    """{schedule source: kernel count} recorded on a ``lower``ed module; {} when none."""
    from .lowering import SCHEDULE_COUNTS

    counts = lowered.attrs.get(SCHEDULE_COUNTS) if lowered.attrs is not None else None
    return {k: int(v) for k, v in counts.items()} if counts is not None else {}


def assembly(executable):
    """The generated assembly text of every compiled kernel library in ``executable``."""
    return "\n".join(m.inspect_source("asm") for m in executable.mod._collect_dso_modules())


def set_threads(threads):
    """Use ``threads`` CPU threads in TVM and PyTorch (call before TVM's runtime starts).

    Their workers keep the runtimes' own wait policies (TVM's spin count, libgomp's): a
    deployed model runs with those, and ``timing`` keeps each runtime's spinning workers
    off the other's timed calls by settling between them.
    """
    os.environ["TVM_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
