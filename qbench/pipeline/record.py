"""The report of a run: a ``report.result.RunResult`` joined from the prepared run, the runners'
results, the speed statistics, the sign-off verdict and the environment."""

import datetime as dt
from dataclasses import asdict

from ..measure.provenance import definition, labels_digest
from ..model import frontend
from ..report.assemble import environment, graph_ops, layer_rows, precision
from ..report.result import DataInfo, ModelInfo, RunResult

NOT_CONFIG = ("quant", "policy", "limits")  # RunOptions fields the report keeps elsewhere


def build_report(p, results, wall_s, speed, verdict, timing, unavailable=None):
    """The run's ``report.result.RunResult``.

    Args:
        p: the built ``Prepared`` run (its ``tuning`` has ``kernels``).
        results: {runner name: ``RunnerResult``}.
        wall_s: the run's wall time, s.
        speed: the run's ``Speed``, or None.
        verdict: the sign-off ``Verdict``.
        timing: the timing's record (``timing.record``: ``environment["timing"]``).
        unavailable: {runner name: why it could not be built}, or None.
    """
    opts, model = p.opts, p.model
    return RunResult(
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        environment={
            **environment(p.target, opts.threads),
            "timing": timing,
            "remote": _remote(p),
        },
        definition=definition(model, _digests(p), p.quant, opts.batch_size, p.target),
        model=ModelInfo(
            name=model.name,
            weights=model.weights,
            random_weights=model.random_weights,
            input_shape=list(model.input_shape),
            aten_ops=p.imported.aten_ops,
        ),
        data=_data(p),
        config=config(opts, p.quant),
        policy=opts.policy,
        precision=precision(p.quant),
        calibration=p.calibration,
        tuning=p.tuning,
        layers=layer_rows(
            p.layers, p.plans, p.ranges, p.quant, (p.unaccounted, p.outside_modules), model.module
        ),
        graph=graph_ops(p.imported.mod, p.int8_mod),
        int8_kernels=p.int8_kernels,
        results=results,
        diagnosis=p.diagnosis,
        wall_time_s=round(wall_s, 2),
        speed=speed,
        signoff=verdict,
        unavailable=unavailable or {},
    )


def config(opts, quant):
    """The report's ``config``: the run's options (``RunOptions``) with its sign-off limits
    flat and ``quant`` (the ``QuantConfig`` as built) as a dict."""
    fields = {k: v for k, v in vars(opts).items() if k not in NOT_CONFIG}
    return {**fields, **asdict(opts.limits), "quant": quant.to_dict()}


def _digests(p):
    """The digests of ``provenance.definition``: the model's graph, the calibration then
    evaluation images, the evaluation labels."""
    images, split = p.images, p.split
    labels = None if images.labels is None else [images.labels[i] for i in split.eval]
    return {
        "graph": frontend.graph_digest(p.imported.mod),
        "data": images.content_digest(tuple(split.calib) + tuple(split.eval)),
        "labels": labels_digest(labels),
    }


def _data(p):
    images, split = p.images, p.split
    return DataInfo(
        source=images.name,
        synthetic=images.synthetic,
        labelled=images.labels is not None,
        calib_size=len(split.calib),
        eval_size=len(split.eval),
        seed=p.opts.seed,
    )


def _remote(p):
    """The report's record of the remote device that ran the TVM builds, or None."""
    if p.device is None:
        return None
    opts = p.opts
    return {
        "rpc": opts.rpc,
        "tracker": opts.rpc_tracker,
        "key": opts.rpc_key,
        "device": p.device.name,
    }
