"""The one build-and-time path of the pipeline: a Relax module built for the run's target
into a runner, and runners timed on a full batch of the run's images."""

from .. import data
from ..compile import build, targets
from ..measure import timing
from ..measure.runners import RemoteTVMRunner, TVMRunner


def tvm_runner(p, mod, name):
    """Build the Relax ``mod`` for the run's target (``Prepared`` ``p``: its databases and
    device) and wrap it as runner ``name``.

    Returns:
        (``TVMRunner`` here or ``RemoteTVMRunner`` on ``p.device``, {schedule source:
        kernel count} of the build).
    """
    shape, n = p.model.input_shape, p.opts.batch_size
    built = build.build(mod, p.target, p.databases, p.device, name)
    if p.device is None:
        runner = TVMRunner(built.vm, targets.device_for(p.target), n, shape, name)
    else:
        runner = RemoteTVMRunner(built.vm, p.device, n, shape, name)
    return runner, built.schedule_counts


def timed(p, runners, indices):
    """``timing.Timed`` of ``runners`` on one full batch of the images ``indices`` of
    ``Prepared`` ``p``: ``p.opts.repeat`` samples each, ms, paired by round
    (``timing.rounds_for``)."""
    opts = p.opts
    n = opts.batch_size
    x, _ = next(data.full_batches(p.images, indices[:n], p.model, n))
    return timing.rounds_for(opts.warmup, opts.repeat).time(runners, x)
