"""PyTorch -> Relax import, with the checks that must pass before anything slow runs.

``torch.export`` captures the model; ``tvm.relax.frontend.torch.from_exported_program``
imports it. BatchNorm is folded into the preceding conv2d (``fold.fold_batchnorm``) and
constants are folded, so that every conv2d and matmul weight is a constant the quantizer
can read.
"""

from dataclasses import dataclass

from ..core.errors import UnsupportedModelError
from ..core.words import first_line
from .contract import check_forward_inputs, check_output_container, check_stateless
from .fold import fold_batchnorm

GEMM_TARGETS = {"convolution", "conv2d", "addmm", "mm", "matmul", "linear"}
TRAINING_OPS = {
    "_native_batch_norm_legit_functional",
    "_native_batch_norm_legit",
    "native_dropout",
    "dropout",
    "bernoulli",
}


@dataclass
class Imported:
    """A model in Relax.

    Attributes:
        mod: ``tvm.IRModule`` whose ``main`` takes one float32 (N, C, H, W) tensor.
        layer_names: source names of the conv2d/matmul layers in graph order (from the
            PyTorch parameter names, e.g. ``_blocks.0._depthwise_conv``; ``#2`` marks a
            module's second call), None where a weight has no parameter name.
        aten_ops: the ATen operators of the exported graph, sorted.
        layer_calls: (module paths, number of calls, op) of every ``nn.Linear`` and
            convolution weight the model reads on one batch (``layer_calls``), or None
            for a model given as an exported program.
    """

    mod: object
    layer_names: list
    aten_ops: list
    layer_calls: list = None


def check_eval_mode(module, name):
    """Refuse a model with any submodule in training mode.

    Raises:
        UnsupportedModelError: names the first submodule still in training mode.
    """
    training = [n or "<root>" for n, m in module.named_modules() if m.training]
    if training:
        raise UnsupportedModelError(
            f"model {name!r}: in training mode (submodule {training[0]!r}); BatchNorm and "
            "Dropout would use batch statistics. Call model.eval() before handing it to qbench"
        )


def check_float32(module, name):
    """Refuse a model whose floating-point parameters or buffers are not float32.

    qbench calibrates, quantizes and compares float32 graphs; a float16, bfloat16 or float64
    model would reach the INT8 rewrite with weights of another dtype.

    Raises:
        UnsupportedModelError: names the first such tensor and its dtype.
    """
    import torch

    tensors = [*module.named_parameters(), *module.named_buffers()]
    other = [(n, t.dtype) for n, t in tensors if t.is_floating_point() and t.dtype != torch.float32]
    if other:
        tensor, dtype = other[0]
        raise UnsupportedModelError(
            f"model {name!r}: tensor {tensor!r} is {str(dtype).removeprefix('torch.')} "
            f"({len(other)} such); only float32 models are supported yet: call "
            "model.float() and remove dtype casts from forward()"
        )


def export(model, batch_size):
    """Capture ``model`` with ``torch.export`` at a static batch size, then decompose to core
    ATen, checking the model's contract (``contract``): one image input, no state updated
    between calls, no training-mode op (the output: ``contract.check_outputs``).

    Args:
        model: a ``zoo.LoadedModel``.
        batch_size: N of the (N, C, H, W) input the graph is specialised to.
    Raises:
        UnsupportedModelError: the model is outside the contract, or the export failed.
    """
    import torch

    ep = model.exported
    check_float32(model.module, model.name)
    if ep is None:
        check_eval_mode(model.module, model.name)
        check_forward_inputs(model.module, model.name)
        example = torch.zeros((batch_size, *model.input_shape), dtype=torch.float32)
        try:
            with torch.no_grad():
                ep = torch.export.export(model.module, (example,))
        except Exception as e:  # noqa: BLE001 - torch.export raises many kinds
            raise UnsupportedModelError(
                f"model {model.name!r}: torch.export failed ({type(e).__name__}: {first_line(e)})"
            ) from e
    else:
        _check_exported_shape(ep, model, batch_size)
    ep = ep.run_decompositions()
    check_exported_inference(ep, model.name, model_in_eval=model.exported is None)
    check_stateless(ep, model.name)
    check_output_container(ep, model.name)
    return ep


def _check_exported_shape(ep, model, batch_size):
    """Require a saved program's input to be (batch_size, *model.input_shape).

    Raises:
        UnsupportedModelError: names the exported shape and the flag that fits it.
    """
    shape = tuple(int(d) for d in _user_input_shape(ep))
    if shape[:1] != (batch_size,):
        raise UnsupportedModelError(
            f"model {model.name!r}: exported with batch {shape[0]}; pass --batch-size {shape[0]}"
        )
    if shape[1:] != tuple(model.input_shape):
        raise UnsupportedModelError(
            f"model {model.name!r}: exported for input {shape}, not {tuple(model.input_shape)}; "
            f"pass --input-shape {' '.join(map(str, shape[1:]))} or none"
        )


def check_exported_inference(ep, name, model_in_eval=False):
    """Refuse a graph captured in training mode (training BatchNorm or dropout ops); ops
    that use the batch's statistics by design (``_by_design``) are not training mode.
    ``model_in_eval``: qbench exported the model after ``check_eval_mode``, so such ops come
    from functional calls with ``training=True``, and the message says so.

    Raises:
        UnsupportedModelError: names the training-mode operator.
    """
    ops = {n.target.__name__ for n in ep.graph.nodes if n.op == "call_function"}
    training = sorted(o for o in ops if o.split(".")[0] in TRAINING_OPS and not _by_design(o))
    if training and model_in_eval:  # every module is in eval mode (check_eval_mode)
        raise UnsupportedModelError(
            f"model {name!r}: forward() calls training-mode ops ({', '.join(training)}) "
            "although every module is in eval mode: a functional call with training=True "
            "(F.dropout(x, p, training=True), F.batch_norm(..., training=True)); pass "
            "training=self.training"
        )
    if training:
        raise UnsupportedModelError(
            f"model {name!r}: graph was captured in training mode ({', '.join(training)}); "
            "call model.eval() before torch.export"
        )


def _by_design(op):
    """Whether ``op`` normalises with the batch's statistics by design, in eval mode too
    (``InstanceNorm2d``, ``BatchNorm2d(track_running_stats=False)``: the ``no_stats``
    overload, case C25), not because the model was left in training mode."""
    return op.endswith(".no_stats")


def num_classes(mod):
    """K of the (N, K) output of ``mod["main"]`` (see ``contract.check_outputs``)."""
    return int(mod["main"].ret_ty.shape[1])


def graph_digest(mod):
    """A digest (hex) of what ``mod`` computes: TVM's structural hash of the whole module,
    operators, shapes and constant (weight) values included. Stable across processes for one
    TVM version; a change anywhere in ``forward`` changes it."""
    import tvm
    import tvm_ffi

    return f"{tvm.__version__}:{tvm_ffi.structural_hash(mod):016x}"


def _user_input_shape(ep):
    names = set(ep.graph_signature.user_inputs)
    return next(n.meta["val"].shape for n in ep.graph.nodes if n.name in names)


def check_ops(ep, name):
    """Stop before calibration when the Relax importer lacks an ATen operator.

    Raises:
        UnsupportedModelError: one line naming the operators and the installed TVM version.
    """
    import tvm
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

    supported = ExportedProgramImporter().create_convert_map()
    missing = sorted(
        {
            n.target.__name__
            for n in ep.graph.nodes
            if n.op == "call_function" and n.target.__name__ not in supported
        }
    )
    if missing:
        raise UnsupportedModelError(
            f"model {name!r}: ATen operator(s) {', '.join(missing)} not supported by the "
            f"Relax importer of TVM {tvm.__version__}"
        )


def import_model(model, batch_size):
    """Export, check and import ``model`` into Relax with folded BatchNorm and constants.

    Raises:
        UnsupportedModelError: training mode or unsupported operators.
    """
    from tvm.relax.frontend.torch import from_exported_program

    ep = export(model, batch_size)
    check_ops(ep, model.name)
    mod = from_exported_program(ep, run_ep_decomposition=False, unwrap_unit_return_tuple=True)
    mod = fold_batchnorm(mod)
    ops = sorted({n.target.__name__ for n in ep.graph.nodes if n.op == "call_function"})
    calls = None if model.exported is not None else layer_calls(model, batch_size)
    return Imported(mod, _gemm_names(ep), ops, calls)


def module_op(module):
    """The Relax op a weighted ``torch.nn`` module becomes (``conv2d``, ``matmul``,
    ``conv1d``, ``conv2d_transpose``, ...), or None for a module that is no such layer."""
    import torch

    if isinstance(module, torch.nn.Linear):
        return "matmul"
    if not isinstance(module, torch.nn.modules.conv._ConvNd):
        return None
    return f"conv{len(module.kernel_size)}d" + ("_transpose" if module.transposed else "")


def layer_calls(model, batch_size):
    """Every ``nn.Linear`` and convolution (``Conv1d/2d/3d``, ``ConvTranspose*``) weight of
    ``model`` (a ``zoo.LoadedModel``)
    and how many calls read it in one eager run on a zero batch (``batch_size``, C, H, W):
    what the layer table must account for, whatever the export and the graph rewrites made
    of them. Modules are grouped by their weight tensor, so one module under two names, or
    two modules sharing a weight, are one entry with every name (the export names the weight
    by one of them).

    Returns:
        list of (module paths, calls, op: ``module_op``), in the model's module order.
    """
    import torch

    groups, ops, calls, handles = {}, {}, {}, []
    for path, sub in model.module.named_modules(remove_duplicate=False):
        if module_op(sub):
            groups.setdefault(id(sub.weight), []).append(path)
            ops.setdefault(id(sub.weight), module_op(sub))
    hooked = set()
    for _, sub in model.module.named_modules():
        if module_op(sub) and id(sub) not in hooked:
            hooked.add(id(sub))
            key = id(sub.weight)
            count = lambda m, a, k=key: calls.update({k: calls.get(k, 0) + 1})  # noqa: E731
            handles.append(sub.register_forward_pre_hook(count))
    try:
        with torch.no_grad():
            model.module(torch.zeros((batch_size, *model.input_shape)))
    finally:
        for handle in handles:
            handle.remove()
    return [(tuple(paths), calls[key], ops[key]) for key, paths in groups.items() if key in calls]


def _gemm_names(ep):
    """Parameter-derived names of conv/matmul nodes in graph order: the module path
    (``layer1.0.conv1``); a module whose weight a second node reads again (a module called
    twice, a shared weight) names it ``<path>#2``, and so on."""
    params = ep.graph_signature.inputs_to_parameters
    names, seen = [], {}
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target.__name__.split(".")[0] in GEMM_TARGETS:
            weight = _find_parameter(node, params)
            if weight is None or not _becomes_layer(node):
                continue  # a product of two activations, a 1-D or transposed conv: no layer
            base = weight.rsplit(".", 1)[0]
            seen[base] = seen.get(base, 0) + 1
            names.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return names


def _becomes_layer(node):
    """Whether a GEMM node with a parameter weight becomes a quantizable layer of the Relax
    graph (``graph.quantizable_call``): a 2-D conv, not transposed (``convolution``'s
    argument 6), or a matmul; a ``Conv1d`` or ``ConvTranspose2d`` does not (case C26's
    kind: names had been dropped for every layer when the counts differed)."""
    if not node.target.__name__.startswith("convolution"):
        return True
    weight = node.args[1].meta.get("val") if hasattr(node.args[1], "meta") else None
    transposed = len(node.args) > 6 and bool(node.args[6])
    return weight is not None and weight.dim() == 4 and not transposed


def _find_parameter(node, params):
    """The parameter FQN a GEMM node reads as its weight, through views and transposes."""
    arg = node.args[2 if node.target.__name__.startswith("addmm") else 1]
    for _ in range(4):
        if getattr(arg, "op", None) == "placeholder":
            return params.get(arg.name)
        if getattr(arg, "op", None) != "call_function" or not arg.args:
            return None
        arg = arg.args[0]
    return None
