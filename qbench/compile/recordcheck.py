"""Reject tuning records whose kernel computes something else, or runs slower than qbench's
default schedule.

MetaSchedule measures speed, never results. In TVM 0.27 some tuned schedules are wrong:
on efficientnet_lite0 the kernels that fuse a conv with the padding of the next layer
(``fused_conv2d*_add*_tir_clip*_pad*``) returned values off by up to the clip range (2.0) on
random inputs, and the whole model's logits fell to 13.9 dB SQNR against PyTorch. And with a
few trials its best is often slower than a plain parallel loop (resnet18's input packing:
1.2 ms tuned against 0.02 ms). qbench therefore runs the best record of every tuned kernel
against the same kernel on qbench's default schedule (``kernels.schedules.CpuFallback``), on
random inputs, lists the workloads that disagree or are slower in ``qbench_rejected.json``
beside the database and the records that passed in ``qbench_checked.json``; builds apply
only the checked records (``dbfiles.FolderContents.usable``).
"""

from pathlib import Path

import numpy as np

from ..core.atomic import write_json
from .dbfiles import CHECKED, REJECTED, read_checked, read_rejected, record_key

RTOL = 1e-3  # of the reference's largest magnitude; FP32 reassociation stays far below
TIMING_NUMBER, TIMING_REPEATS = 10, 5  # calls per timing, timings (median taken)
SLOWER = 1.10  # a tuned kernel is slower past this ratio to the default, in two timings


def rejected(folder):
    """The structural-hash keys (strings) of the rejected workloads in ``folder``.

    Raises:
        ValueError: the rejection list is damaged.
    """
    return read_rejected(folder)


def check_records(tasks, target, folder, remote=None):
    """Check the best record of each of ``tasks`` (MetaSchedule ``ExtractedTask``) in the
    database ``folder``; add the wrong and the slow ones to its rejection list, the others
    to its check list (``dbfiles.record_key``; one already listed is not run again). ``remote``
    (a ``remote.Remote``): run the checks on one of its devices, else here.

    Returns:
        "kernel (reason)" strings for the kernels rejected by this call.
    """
    from tvm.s_tir import meta_schedule as ms

    from ..core.remote import connect

    database = ms.database.JSONDatabase(work_dir=str(folder))
    device = connect(remote) if remote is not None else None
    bad, good, names = set(), set(), []
    checked, known_bad = read_checked(folder), rejected(folder)
    for task in tasks:
        mod = task.dispatched[0]
        if not database.has_workload(mod):
            continue
        workload = database.commit_workload(mod)
        top = database.get_top_k(workload, 1)
        key = record_key(workload, top[0]) if top else None
        if key is None or key in checked or workload.as_json()[0] in known_bad:
            continue
        reason = _fault(top[0], target, device)
        if reason:
            bad.add(workload.as_json()[0])
            names.append(f"{task.task_name} ({reason})")
        else:
            good.add(key)
    if bad:
        write_json(Path(folder) / REJECTED, sorted(known_bad | bad))
    if good:
        write_json(Path(folder) / CHECKED, sorted(checked | good))
    return names


def _fault(record, target, device=None):
    """ "" when the ``record``'s schedule of its workload agrees with qbench's default schedule
    on random inputs and is not slower than it (by more than ``SLOWER`` in each of two
    timings), else why not.

    The trace is applied to the workload the database stored, as a build's lookup does: a
    kernel the database matches may differ from it in block names only (structural equality
    ignores them), and the trace then names blocks the kernel lacks."""
    import tvm
    from tvm import s_tir
    from tvm.s_tir import dlight

    from .kernels.schedules import CpuFallback

    mod = record.workload.mod
    sch = s_tir.Schedule(mod)
    record.trace.apply_to_schedule(sch, remove_postproc=False)
    with tvm.target.Target(target):
        reference = dlight.ApplyDefaultSchedule(CpuFallback())(mod)
    inputs = _random_args(mod)
    (got, tuned_ms), (want, default_ms) = (
        _run(sch.mod, inputs, target, device),
        _run(reference, inputs, target, device),
    )
    if not all(
        np.allclose(g, w, rtol=0, atol=RTOL * max(1.0, np.abs(w).max()))
        for g, w in zip(got, want, strict=True)
    ):
        return "wrong results"
    if tuned_ms <= SLOWER * default_ms:
        return ""
    # a rejection is kept for good: a busy machine's one slow timing must not decide it
    again = _run(sch.mod, inputs, target, device)[1], _run(reference, inputs, target, device)[1]
    if again[0] <= SLOWER * again[1]:
        return ""
    return (
        f"slower than the default schedule, {tuned_ms:.3f} > {default_ms:.3f} ms, then "
        f"{again[0]:.3f} > {again[1]:.3f} ms"
    )


def _random_args(mod):
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    rng = np.random.default_rng(0)
    args = []
    for info in ArgInfo.from_prim_func(mod["main"]):
        shape, dtype = [int(s) for s in info.shape], str(info.dtype)
        if dtype.startswith(("int", "uint")):
            args.append(rng.integers(0, 8, shape).astype(dtype))
        else:
            args.append(rng.uniform(-2, 2, shape).astype(dtype))
    return args


def _run(mod, inputs, target, device=None):
    """Run ``mod`` once on copies of ``inputs``, here or on the ``remote.Device``
    ``device``; returns (the arrays after the call, the median ms of ``TIMING_REPEATS``
    timed calls)."""
    import tvm

    from ..core.remote import upload

    lib = tvm.compile(mod, target=tvm.target.Target(target))
    if device is None:
        dev, module = tvm.cpu(0), lib.mod
    else:
        dev, module = device.tvm_device(), upload(device, lib, "kernel")
    arrays = [tvm.runtime.tensor(a.copy(), dev) for a in inputs]
    module["main"](*arrays)
    outputs = [a.numpy() for a in arrays]
    timer = module.time_evaluator("main", dev, number=TIMING_NUMBER, repeat=TIMING_REPEATS)
    return outputs, float(np.median(timer(*arrays).results)) * 1e3
