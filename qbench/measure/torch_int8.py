"""PyTorch's own INT8, the user's alternative to TVM's: FX graph mode with the x86 backend
(FBGEMM / oneDNN kernels; ``torch.ao.quantization.quantize_fx``) and torchao's PT2E flow with
``X86InductorQuantizer`` (compiled by ``torch.compile``), each calibrated on the run's
calibration images. A flow that cannot be built for a model is a ``NotAvailable`` with its
reason, never a failed run.
"""

import logging
import warnings
from dataclasses import dataclass

from ..core.words import first_line
from .runners import TorchRunner

log = logging.getLogger(__name__)

FX, PT2E = "torch_int8_fx", "torch_int8_pt2e"  # runner names, as report.json keys them
TITLES = {FX: "PyTorch INT8 (FX x86)", PT2E: "PyTorch INT8 (torchao PT2E)"}


@dataclass(frozen=True)
class NotAvailable:
    """A PyTorch INT8 flow that could not be built for the model: ``name`` (``FX`` or
    ``PT2E``) and ``reason`` (the first line of its error)."""

    name: str
    reason: str


def torch_int8_runners(module, calib, batch_size, input_shape, flows=(FX, PT2E)):
    """The PyTorch INT8 runners of ``module``, calibrated on ``calib``.

    Args:
        module: the FP32 PyTorch model, eval mode.
        calib: iterable of float32 numpy (batch_size, C, H, W) calibration batches; read
            once per flow (a list).
        batch_size: N of every batch.
        input_shape: (C, H, W).
        flows: the flows to build, among ``FX`` and ``PT2E``.
    Returns:
        list, in ``flows``' order, of ``TorchRunner`` (named ``FX`` / ``PT2E``) or
        ``NotAvailable``. PyTorch's warnings while building (FX's deprecation notices) go to
        the log, not the console.
    """
    makers = {FX: _fx_x86, PT2E: _pt2e_x86}
    found = []
    for name in flows:
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                quantized = makers[name](module, calib, batch_size, input_shape)
            for w in seen:
                log.info("%s: %s: %s", name, w.category.__name__, w.message)
            found.append(TorchRunner(quantized, batch_size, input_shape, name))
        except Exception as e:  # noqa: BLE001 - any failure is the flow's row, with its reason
            found.append(NotAvailable(name, _reason(e)))
    return found


def _reason(error):
    """``Type: first line`` of the error (its first 200 characters), or the type alone."""
    first, name = first_line(error), type(error).__name__
    return name if first == name else f"{name}: {first[:200]}"


def _fx_x86(module, calib, batch_size, input_shape):
    """FX graph mode quantization with the x86 default qconfig mapping (per-channel int8
    weights, uint8 activations with ``reduce_range``), observers run on ``calib``."""
    import copy

    import torch
    from torch.ao.quantization import get_default_qconfig_mapping, quantize_fx

    example = (torch.zeros((batch_size, *input_shape)),)
    model = copy.deepcopy(module).eval()
    prepared = quantize_fx.prepare_fx(model, get_default_qconfig_mapping("x86"), example)
    with torch.no_grad():
        for x in calib:
            prepared(torch.from_numpy(x.copy()))
    return quantize_fx.convert_fx(prepared)


def _pt2e_x86(module, calib, batch_size, input_shape):
    """torchao's PT2E flow: ``torch.export``, ``X86InductorQuantizer``'s default config,
    observers run on ``calib``, converted and compiled with ``torch.compile`` (compiled here,
    by one call on zeros, so that a compile failure is the flow's row)."""
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    example = (torch.zeros((batch_size, *input_shape)),)
    exported = torch.export.export(module, example).module()
    quantizer = X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(exported, quantizer)
    with torch.no_grad():
        for x in calib:
            prepared(torch.from_numpy(x.copy()))
    compiled = torch.compile(convert_pt2e(prepared))
    with torch.no_grad():
        compiled(*example)  # compile now, inside the builder: a failure is its row
    return compiled
