"""Runners with one public ``infer()`` (checks input, pads the batch) over ``infer_impl()``.

Every runner takes the same float32 (N, C, H, W) batches and returns float32 (N, K) logits,
the Polygraphy runner pattern. Graphs are compiled for a static batch; a short last batch
is zero-padded and the padding rows dropped.
"""

import logging
import time

import numpy as np

from ..data.batches import pad_batch

log = logging.getLogger(__name__)


class Runner:
    """Base runner. ``batch_size`` is the static N the runner was built for; runners of one
    ``runtime`` share its thread pool (``timing`` settles between runtimes)."""

    name = "runner"
    runtime = "none"
    device_name = "host"  # the device that runs it, as reports name it

    def __init__(self, batch_size, input_shape):
        self.batch_size = batch_size
        self.input_shape = tuple(input_shape)

    def infer(self, x):
        """Run one batch.

        Args:
            x: float32 (n, C, H, W), n <= batch_size.
        Returns:
            float32 (n, K) first output of the model.
        Raises:
            ValueError: wrong shape or dtype.
        """
        x = np.asarray(x)
        if (
            x.dtype != np.float32
            or x.shape[1:] != self.input_shape
            or not 0 < len(x) <= self.batch_size
        ):
            raise ValueError(
                f"{self.name}: expected float32 (<= {self.batch_size}, "
                f"{', '.join(map(str, self.input_shape))}), got {x.dtype} {x.shape}"
            )
        return self.infer_impl(pad_batch(x, self.batch_size))[: len(x)]

    def infer_impl(self, x):
        raise NotImplementedError

    def timed_call(self, x):
        """A zero-argument callable running one full batch ``x`` to completion. It returns
        None, or the call's latency in ms when the device timed it itself (``timing``)."""

        def run():
            self.infer_impl(x)

        return run


def time_samples(run, warmup, repeat):
    """Call ``run`` ``warmup`` times untimed, then ``repeat`` times timed; the samples in ms."""
    for _ in range(warmup):
        run()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


class TorchRunner(Runner):
    """PyTorch eager FP32 under ``torch.no_grad``. The model gets its own copy of each batch:
    a ``forward`` that writes to its input (``x.sub_(0.5)``, a first ``ReLU(inplace=True)``)
    would otherwise change the batch the next runners read (case C22); the first such write
    seen is logged as a warning."""

    runtime = "pytorch"

    def __init__(self, module, batch_size, input_shape, name="pytorch_fp32"):
        super().__init__(batch_size, input_shape)
        self.module, self.name = module, name
        self.writes_input = False

    def infer_impl(self, x):
        import torch

        data = torch.from_numpy(x.copy())
        with torch.no_grad():
            out = self.module(data)
        if not self.writes_input and not np.array_equal(data.numpy(), x, equal_nan=True):
            self.writes_input = True
            log.warning(
                "%s: the model's forward() writes to its input tensor in place; each runner "
                "is given its own copy of every batch",
                self.name,
            )
        out = out[0] if isinstance(out, (tuple, list)) else out
        return out.float().numpy()

    def timed_call(self, x):
        """The model on its own copy of ``x``, made once: the copy is not timed."""
        import torch

        data = torch.from_numpy(x.copy())

        def run():
            with torch.no_grad():
                self.module(data)

        return run


class TVMRunner(Runner):
    """A compiled Relax ``main`` on a ``relax.VirtualMachine``; returns output 0 (and all
    outputs through ``infer_all``)."""

    runtime = "tvm"

    def __init__(self, vm, device, batch_size, input_shape, name):
        super().__init__(batch_size, input_shape)
        self.vm, self.device, self.name = vm, device, name

    def infer_all(self, x):
        """All outputs of ``main`` for a full batch, as numpy arrays."""
        import tvm

        out = self.vm["main"](tvm.runtime.tensor(x, self.device))
        if isinstance(out, tvm.runtime.Tensor):
            return [out.numpy()]
        return [o.numpy() for o in out]

    def infer_impl(self, x):
        return self.infer_all(x)[0]

    def timed_call(self, x):
        """Input copied to the device once; each call runs ``main`` and waits for the device."""
        import tvm

        data = tvm.runtime.tensor(x, self.device)
        main = self.vm["main"]

        def run():
            main(data)
            self.device.sync()

        return run


class RemoteTVMRunner(TVMRunner):
    """A ``TVMRunner`` on a device over TVM RPC (``remote.Device``): each batch goes over the
    connection and its logits come back; timed by the device's own timer
    (``time_evaluator``), so the connection's round trip is not in the figures. A dropped
    connection raises ``remote.RemoteLost`` (exit code 2) naming the device."""

    runtime = "rpc"

    def __init__(self, vm, remote, batch_size, input_shape, name):
        super().__init__(vm, remote.tvm_device(), batch_size, input_shape, name)
        self.remote, self.device_name = remote, remote.name

    def infer_all(self, x):
        try:
            return super().infer_all(x)
        except (OSError, RuntimeError) as e:
            raise self.remote.lost(e) from e

    def timed_call(self, x):
        """One call of ``main`` on ``x`` (uploaded once), timed on the device, ms."""
        import tvm

        try:
            self.vm.set_input("main", tvm.runtime.tensor(x, self.device))
            timer = self.vm.time_evaluator("invoke_stateful", self.device, number=1, repeat=1)
        except (OSError, RuntimeError) as e:
            raise self.remote.lost(e) from e

        def run():
            try:
                return timer("main").mean * 1e3
            except (OSError, RuntimeError) as e:
                raise self.remote.lost(e) from e

        return run


def observer_runner(mod, target, input_shape, batch_size, databases=()):
    """A ``TVMRunner`` of ``graph.observer_module(mod)`` built for ``target``: its
    ``infer_all(x)`` returns the output and every observed tensor, for calibration.

    Args:
        mod: FP32 ``tvm.IRModule``; target: TVM target dict; input_shape: (C, H, W);
        batch_size: the static N of ``mod``; databases: tuning database folders.
    """
    from ..compile import build
    from ..compile.targets import device_for
    from ..model.graph import observer_module

    vm = build.build(observer_module(mod), target, databases).vm
    return TVMRunner(vm, device_for(target), batch_size, input_shape, "observer")
