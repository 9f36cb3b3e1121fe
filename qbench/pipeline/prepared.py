"""``Prepared``: what ``pipeline.prepare`` hands to the builds, the diagnosis and the report.
Only the pipeline reads it; the stages before take its parts as arguments."""

from dataclasses import dataclass

import tvm

from ..calibration.calibrate import CalibrationInfo
from ..calibration.collectors import Range
from ..compile.info import Int8Kernels, TuningInfo
from ..core.remote import Device
from ..data.images import ImageSet
from ..data.splits import Split
from ..model.frontend import Imported
from ..model.graph import Layer
from ..model.zoo import LoadedModel
from ..quantize import QuantConfig
from ..quantize.rewrite import LayerPlan
from ..report.diagnosis import DiagnosisReport
from .options import RunOptions


@dataclass(frozen=True)
class Prepared:
    """A run up to its builds: the options, model, data, Relax import, calibration and the
    INT8 graph. Frozen: a later step (the FP32 fallback, tuning, the builds' kernel counts)
    returns a new ``Prepared`` (``dataclasses.replace``).

    Fields:
        opts: the ``RunOptions`` the run was given (never rewritten).
        quant: the ``QuantConfig`` as built: ``opts.quant`` with nearest rounding or no bias
            correction where ``refine`` had to skip them, and the fallback's
            ``fallback_layers`` once ``--accuracy-target`` picked them.
        images, split, holdout: the image source, its calibration and evaluation indices,
            and the held-out indices (``--holdout-size``; the fallback's), or ().
        target: TVM target dict (``targets.parse_target``).
        imported, layers: the FP32 Relax import and its conv2d/matmul layers in graph order.
        databases, tuning: the MetaSchedule database folders the builds apply and the
            report's ``TuningInfo`` (its ``kernels`` once built).
        ranges, calibration: {layer name: ``Range``} and the report's ``CalibrationInfo``
            (its ``weight_rounding`` and ``bias_correction`` once the INT8 graph is built).
        plans, int8_mod, int8_kernels: one ``LayerPlan`` per layer, the INT8 Relax module
            and the report's ``Int8Kernels``.
        diagnosis: the ``DiagnosisReport`` with ``--diagnose`` or ``--accuracy-target``,
            else None.
        unaccounted: ``graph.unaccounted_calls``: the model's Linear and convolution calls
            no layer stands for (they run in FP32; the layer table counts them).
        outside_modules: ``graph.products_outside_modules``: (op, count) of the FP32
            products of an activation and a weight that no module call stands for.
        device: the remote ``Device`` that runs the TVM builds, or None: this machine.
    """

    opts: RunOptions
    model: LoadedModel
    images: ImageSet
    split: Split
    holdout: tuple
    target: dict
    imported: Imported
    layers: list[Layer]
    databases: list
    tuning: TuningInfo
    quant: QuantConfig = None  # None only inside prepare, before the INT8 rewrite
    ranges: dict[str, Range] = None  # None only inside prepare, before calibration
    calibration: CalibrationInfo = None  # idem
    plans: list[LayerPlan] = None  # None only inside prepare, before the INT8 rewrite
    int8_mod: tvm.IRModule = None  # idem
    int8_kernels: Int8Kernels = None  # idem
    diagnosis: DiagnosisReport = None
    unaccounted: tuple = ()
    outside_modules: tuple = ()
    device: Device = None
