"""``Prepared``: what ``pipeline.prepare`` hands to the builds, the diagnosis and the report."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Prepared:
    """A run up to its builds: checked options, model, data, Relax import, calibration and
    the INT8 graph. Frozen: a later step (the FP32 fallback, tuning, the builds' kernel
    counts) returns a new ``Prepared`` (``dataclasses.replace``).

    Fields:
        opts: ``pipeline.RunOptions`` (with the fallback's ``quant.fallback_layers`` once
            ``--accuracy-target`` picked them).
        model: ``zoo.LoadedModel``.
        images: the image source (``data.open_source``).
        split: ``data.Split``: calibration and evaluation indices into ``images``.
        holdout: tuple of held-out indices (``--holdout-size``; the fallback's), or ().
        target: TVM target dict (``targets.parse_target``).
        imported: ``frontend.Imported``: the FP32 Relax module, layer names, ATen ops.
        layers: list of ``graph.Layer``, conv2d/matmul in graph order.
        databases: list of the MetaSchedule database folders (``pathlib.Path``) the builds
            apply (``tuning.databases``).
        tuning: the report's ``tuning`` dict (source, database, record counts, ``fresh``
            tuning summaries; ``kernels``: {graph name: {schedule source: kernel count}}
            once built).
        ranges: {layer name: ``calibration.Range``}, the calibrated input ranges.
        calibration: the report's ``calibration`` dict (cache key and folder, hit, images,
            mode, params, ``seconds`` on a miss, ``bias_correction``).
        plans: list of ``quantize.rewrite.LayerPlan``, one per layer of ``layers``.
        int8_mod: the INT8 Relax ``tvm.IRModule``.
        int8_kernels: the report's ``int8_kernels`` dict (``cpu_class``, ``paths``: INT8
            layers by kernel path).
        diagnosis: the per-layer diagnosis report dict (``diagnose.run``) with
            ``--diagnose`` or ``--accuracy-target``, else None.
        unaccounted: ``graph.unaccounted_calls``: the model's Conv2d/Linear calls that no
            layer of the graph stands for (they run in FP32; the layer table counts them).
        device: the ``remote.Device`` that runs the TVM builds (``--rpc``,
            ``--rpc-tracker``), or None: this machine.
    """

    opts: object
    model: object
    images: object
    split: object
    holdout: tuple
    target: dict
    imported: object
    layers: list
    databases: list
    tuning: dict
    ranges: dict = None  # None only inside prepare, before calibration
    calibration: dict = None  # idem
    plans: list = None  # None only inside prepare, before the INT8 rewrite
    int8_mod: object = None  # idem
    int8_kernels: dict = None  # idem
    diagnosis: dict = None
    unaccounted: list = ()  # graph.unaccounted_calls: Conv2d/Linear calls with no layer
    device: object = None  # remote.Device, or None: the builds run here
