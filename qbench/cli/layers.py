"""``qbench layers``: a model's quantizable layers (index, name, shape, INT8 or FP32),
without calibrating or building."""

from .exits import EXIT_PASS
from .options import add_model_options
from .runopts import skip_list


def add_parser(command):
    """Add ``qbench layers`` through ``command(name, help)``, the sub-parser factory."""
    la = command(
        "layers",
        "list a model's quantizable layers (index, name, shape, INT8 or FP32) without "
        "calibrating or building, to write --skip-layers",
    )
    add_model_options(la)


def run(args):
    """``qbench layers``: import the model and print its quantizable layers; no calibration."""
    from ..core.progress import stage
    from ..model import frontend, graph, zoo
    from ..pipeline.options import RunOptions
    from ..quantize import QuantConfig
    from ..quantize.plan import fp32_reasons
    from ..report.tables import layers_preview_table

    opts = RunOptions(  # checks the options layers shares with run, as run does
        model=args.model,
        weights=args.weights,
        input_shape=args.input_shape,
        batch_size=args.batch_size,
    )
    with stage("load model") as st:
        model = zoo.load_model(opts.model, opts.weights, opts.input_shape)
        st.note = f"weights: {model.weights}"
    with stage("import to Relax") as st:
        imported = frontend.import_model(model, opts.batch_size)
        layers = graph.find_layers(imported.mod, imported.layer_names)
        st.note = f"{len(layers)} conv2d/matmul layers"
    config = QuantConfig(skip_layers=skip_list(args.skip_layers), skip_first=args.keep_first_fp32)
    reasons = fp32_reasons(layers, config)
    print(layers_preview_table(layers, reasons, "simple"))
    int8 = sum(not r for r in reasons)
    print(
        f"\n{int8} of {len(layers)} layers would run in INT8. Weight shape: conv2d (out, in / "
        "groups, kH, kW), matmul (in, out). --skip-layers takes the # or the layer name."
    )
    return EXIT_PASS
