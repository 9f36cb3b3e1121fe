"""The model's contract, checked at load, export and import, before anything slow: one image
input (N, C, H, W), one float32 output of class scores (N, K), and no state carried between
calls.
qbench calibrates on some images and compares runners on others, so a model outside the
contract would be measured wrongly, not merely slowly; each check names what it found.
"""

import inspect

from ..core.errors import UnsupportedModelError

TAKES = "qbench takes models with one (N, C, H, W) image input"
GIVES = "qbench compares class scores: one float32 (N, K) output"
RANDOM_OPS = {  # ATen ops that draw from the generator: state that changes on every call
    "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm",
    "normal", "uniform", "bernoulli", "multinomial", "poisson", "exponential",
}  # fmt: skip


def check_forward_inputs(module, name):
    """Refuse a ``forward`` that needs more than one argument (an image and side inputs).

    Raises:
        UnsupportedModelError: names the required arguments.
    """
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):  # a forward without a Python signature: export decides
        return
    required = [
        p.name
        for p in params
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    if len(required) > 1:
        raise UnsupportedModelError(
            f"model {name!r}: forward({', '.join(required)}) takes {len(required)} inputs; "
            f"{TAKES}: wrap it in a module whose forward(x) supplies the others"
        )


def check_program_inputs(ep, name):
    """Refuse a saved program (``torch.export.ExportedProgram``) whose user inputs are not
    one 4-D (N, C, H, W) tensor.

    Returns:
        (C, H, W) of its one image input.
    Raises:
        UnsupportedModelError: names each input and its shape.
    """
    shapes = _input_shapes(ep)
    found = ", ".join(f"{n} {tuple(s)}" for n, s in shapes.items())
    if len(shapes) != 1:
        raise UnsupportedModelError(
            f"model {name!r}: the program takes {len(shapes)} inputs ({found}); {TAKES}"
        )
    (shape,) = shapes.values()
    if len(shape) != 4:
        raise UnsupportedModelError(f"model {name!r}: its input is {found}, not an image; {TAKES}")
    return tuple(int(d) for d in shape[1:])


def check_outputs(mod, name, batch_size):
    """Refuse a Relax import (``frontend.import_model``) whose ``main`` does not return one
    float32 (N, K) tensor with N = ``batch_size`` and K >= 1.

    Raises:
        UnsupportedModelError: names the output found: its shapes and dtypes.
    """
    from tvm import relax, tirx

    ret = mod["main"].ret_ty
    found = _describe(ret)
    if not isinstance(ret, relax.TensorType) or ret.ndim != 2 or ret.dtype != "float32":
        raise UnsupportedModelError(f"model {name!r}: its output is {found}; {GIVES}")
    if not isinstance(ret.shape[0], tirx.IntImm):
        raise UnsupportedModelError(
            f"model {name!r}: its output is {found}: its batch dimension is symbolic "
            f"(exported with a dynamic Dim); export the program at --batch-size {batch_size}"
        )
    if int(ret.shape[0]) != batch_size:
        raise UnsupportedModelError(
            f"model {name!r}: its output is {found} for a batch of {batch_size}: rows are not "
            f"images; {GIVES}, a row per image"
        )
    if isinstance(ret.shape[1], tirx.IntImm) and int(ret.shape[1]) < 1:
        raise UnsupportedModelError(
            f"model {name!r}: its output is {found}: no score per image; {GIVES}, K >= 1"
        )


def check_output_container(ep, name):
    """Refuse a program whose output is a dict or another container but a tuple or list
    (those are refused or unwrapped with the output's shapes, ``check_outputs``): the
    PyTorch runner compares one tensor.

    Raises:
        UnsupportedModelError: names the container's type.
    """
    spec = ep.call_spec.out_spec
    if spec is not None and not spec.is_leaf() and spec.type not in (tuple, list):
        raise UnsupportedModelError(
            f"model {name!r}: forward() returns a {spec.type.__name__}; {GIVES}, returned as "
            "a tensor"
        )


def check_stateless(ep, name):
    """Refuse a program that carries state between calls: buffers or parameters it updates
    on every call (a moving average, a counter), as ``torch.export``'s graph signature
    records them, or random numbers it draws (the generator's state). Its output
    depends on the calls before, while a compiled build keeps the values of the export, so
    no comparison of the two holds (case C27). A model writing into its input is allowed
    (the runners each get their own copy, case C22).

    Raises:
        UnsupportedModelError: names the mutated buffers and parameters, or the random ops.
    """
    sig = ep.graph_signature
    mutated = sorted({*sig.buffers_to_mutate.values(), *sig.parameters_to_mutate.values()})
    ops = {n.target.__name__ for n in ep.graph.nodes if n.op == "call_function"}
    drawn = sorted(o for o in ops if o.split(".")[0] in RANDOM_OPS)
    if drawn:
        raise UnsupportedModelError(
            f"model {name!r}: forward() draws random numbers ({', '.join(drawn)}), so two calls "
            "on the same image differ and no comparison of runners would hold; qbench takes "
            "models that are deterministic in eval mode"
        )
    if mutated:
        raise UnsupportedModelError(
            f"model {name!r}: forward() updates {', '.join(repr(m) for m in mutated)} on every "
            "call, so its output depends on the calls before it while a compiled build keeps "
            "the values at export: no comparison with it would hold. qbench takes models "
            "stateless between calls: update them only when self.training"
        )


def _input_shapes(ep):
    """{user input name: shape} of an exported program, in order."""
    names = list(ep.graph_signature.user_inputs)
    vals = {n.name: n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"}
    return {n: tuple(getattr(vals.get(n), "shape", ())) for n in names}


def _describe(ty):
    """``(2, 10) float32`` for a Relax tensor type (a symbolic dimension as ``?``); a
    tuple's fields joined by ``, ``."""
    fields = getattr(ty, "fields", None)
    if fields is not None:
        return ", ".join(_describe(f) for f in fields)
    shape = getattr(ty, "shape", None)
    if shape is None:
        return str(ty)
    from tvm import tirx

    dims = [str(int(d)) if isinstance(d, tirx.IntImm) else "?" for d in shape]
    return f"({', '.join(dims)}{',' if len(dims) == 1 else ''}) {ty.dtype}"
