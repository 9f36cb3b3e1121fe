"""A run up to its builds (``Prepared``): checks, device, data, model, Relax import,
calibration (cached) and the INT8 rewrite; the tuning databases its builds apply."""

import logging
import time
from collections import Counter
from dataclasses import asdict, replace

from .. import data
from ..calibration.calibrate import (
    CalibrationInfo,
    cache_key,
    calibrate_module,
    load_cached,
    range_names,
    save_cached,
)
from ..compile import build, dbfiles, targets, tuning
from ..compile.info import Int8Kernels, TuningInfo
from ..compile.kernels import select
from ..core.atomic import check_writable
from ..core.errors import UserError
from ..core.progress import random_weights_warning, say, stage
from ..measure.runners import observer_runner
from ..model import frontend, graph, zoo
from ..model.contract import check_outputs
from ..quantize.plan import check_skip_layers, fp32_reasons, make_plans
from ..quantize.refine import calib_images, refine
from ..quantize.rewrite import rewrite
from .prepared import Prepared

log = logging.getLogger(__name__)


def prepare(opts):
    """Everything before the builds: checks, model, data, import, calibration, INT8 rewrite.

    Returns:
        ``prepared.Prepared`` (no ``diagnosis`` yet).
    Raises:
        UserError: bad input, detected before any slow step where possible.
    """
    check_writable(opts.cache_dir, "--cache-dir")
    check_writable(opts.reports_dir, "--reports-dir")
    check_writable(opts.tuning_db, "--tuning-db")
    build.set_threads(opts.threads)
    device = connect_device(opts)
    target = targets.parse_target(opts.target, opts.threads, device, not opts.build_only)
    if opts.tune:  # before the slow steps: tuning appends to the database
        dbfiles.check_undamaged(tuning.db_dir(opts.tuning_db, target))
    needed = (opts.calib_size or 32) + (opts.eval_size or 100) + opts.holdout_size
    with stage("open data") as st:
        images = data.open_source(opts.data, opts.seed, needed)
        split = data.split(images, opts.calib_size, opts.eval_size, opts.seed)
        held = (
            data.holdout(images, split, opts.holdout_size, opts.seed) if opts.holdout_size else ()
        )
        data.check_images(
            images, {"calibration": split.calib, "evaluation": split.eval, "held-out": held}
        )
        st.note = f"{images.name}: {len(split.calib)} calibration, {len(split.eval)} evaluation"
    with stage("load model") as st:
        model = zoo.load_model(opts.model, opts.weights, opts.input_shape, opts.mean, opts.std)
        st.note = f"weights: {model.weights}"
    if model.random_weights:
        say(random_weights_warning(model.name))
    with stage("import to Relax") as st:
        imported = frontend.import_model(model, opts.batch_size)
        check_outputs(imported.mod, model.name, opts.batch_size)
        layers = graph.find_layers(imported.mod, imported.layer_names)
        st.note = f"{len(layers)} conv2d/matmul layers"
    classes = frontend.num_classes(imported.mod)
    data.check_labels(images, classes, model.name)
    if opts.accuracy_target is not None and classes == 1:
        raise UserError(
            f"--accuracy-target {opts.accuracy_target}: model {model.name!r} has a single "
            "output logit, so top-1 agreement means nothing; judge it by --min-sqnr and "
            "--min-cosine, and see the per-layer SQNR with --diagnose"
        )
    data.check_input_shape(images, split.calib[0], model.preprocess, model.input_shape)
    log.info("layers: %s", ", ".join(f"{la.index} {la.name}" for la in layers))
    check_skip_layers(opts.quant.skip_layers, layers)
    if opts.diagnose or opts.accuracy_target is not None:
        from ..quantize.fakequant import check_modules

        reasons = fp32_reasons(layers, opts.quant)
        check_modules(model.module, layers, reasons, model.input_shape, opts.batch_size)
    databases, tuning_info = tuning_databases(opts, target)
    p = Prepared(opts, model, images, split, held, target, imported, layers, databases, tuning_info)
    unaccounted = graph.unaccounted_calls(imported.layer_calls, layers)
    outside = graph.products_outside_modules(imported.mod, unaccounted)
    p = replace(p, unaccounted=unaccounted, outside_modules=outside, device=device)
    _warn_fp32_products(p)
    with stage("calibration") as st:
        ranges, cal = _calibrate(p)
        miss = f"cache miss: {cal.mode} on {cal.images} images"
        st.note = "cache hit" if cal.cache_hit else miss
    log.info("calibration cache: %s/%s.json", cal.cache_dir, cal.cache_key)
    with stage("INT8 rewrite") as st:
        p, st.note = int8_rewrite(replace(p, ranges=ranges, calibration=cal), opts.quant)
    _warn_about_kernels(p)
    return p


def _warn_fp32_products(p):
    """Say which weighted products of the model stay FP32 outside the layer list: module
    calls no layer stands for (``Prepared.unaccounted``) and products outside any module
    (``Prepared.outside_modules``)."""
    for path, n, op in p.unaccounted:
        why = (
            "the export made another op pattern of them"
            if op in ("conv2d", "matmul")
            else f"qbench has no INT8 {op}"
        )
        say(f"WARNING: {path}: {n} {op} call(s) are no INT8 layer ({why}); they run in FP32")
    for op, n in p.outside_modules:
        say(
            f"WARNING: {n} {op} product(s) of an activation and a constant weight outside any "
            "Conv/Linear module (a functional conv, matmul or einsum on a parameter) run in FP32"
        )


def connect_device(opts):
    """The ``remote.Device`` of ``--rpc`` / ``--rpc-tracker``, or None (the builds run here).

    Raises:
        UserError: bad addresses, no such device, or an option that does not work with a
            remote device yet.
    """
    from ..core.remote import connect, parse_remote

    remote = parse_remote(opts.rpc, opts.rpc_tracker, opts.rpc_key)
    if remote is None:
        return None
    if opts.tune:
        tuning_remote(opts)
    unsupported = {
        "--accuracy-target": opts.accuracy_target is not None,
        "--diagnose": opts.diagnose,
    }
    for flag, given in unsupported.items():
        if given:
            raise UserError(
                f"{flag} with {remote.words()}: not supported on a remote device yet (its "
                "builds are timed here); run it without --rpc/--rpc-tracker"
            )
    with stage("connect") as st:
        device = connect(remote)
        st.note = device.name
    return device


def _warn_about_kernels(p):
    """Say that INT8 layers will run on default schedules when ``p.target`` has no INT8
    kernels in qbench (and the graph is not simulated), and that ``--reduce-range`` or
    ``--fit-pairs`` buys nothing on a target whose INT8 kernel is not the AVX2 one."""
    opts, target = p.opts, p.target
    cpu_class = p.int8_kernels.cpu_class
    costs = {  # flag: what its weights cost (docs/measurements.md, efficientnet_lite0)
        "--reduce-range": (opts.quant.reduce_range, "7-bit weights (about 3 dB of SQNR)"),
        "--fit-pairs": (opts.quant.fit_pairs, "coarser grids where pairs would not fit"),
    }
    for flag, (given, cost) in costs.items():
        if given and cpu_class != "AVX2":
            say(
                f"WARNING: {flag} on a CPU of class {cpu_class}: its INT8 kernels gain "
                f"nothing from {cost}, which cost precision (only AVX2 CPUs without VNNI "
                "gain)"
            )
    no_fast_path = cpu_class == select.NO_FAST_PATH
    if no_fast_path and not opts.quant.simulate:
        say(
            f"WARNING: this target (mcpu {target.get('mcpu', 'default')}) has no INT8 fast path "
            "in qbench (needs one of: "
            f"{', '.join(select.cpu_classes())}): INT8 conv2d/matmul layers run on default "
            "schedules and will likely be slower than FP32"
        )


def int8_rewrite(p, quant):
    """Plan every layer with ``quant`` (a ``QuantConfig``), refine the plans (``refine``:
    GPTQ rounding, bias correction), rewrite the INT8 graph and describe its kernels.
    Returns (a new ``Prepared`` with ``plans``, ``int8_mod``, ``int8_kernels``,
    ``calibration``'s ``weight_rounding`` and ``bias_correction``, and ``quant`` as built:
    nearest rounding and no bias correction where ``refine`` had to skip them; a note for
    the stage line)."""
    opts = p.opts

    def calib_x():
        return calib_images(p.images, p.split.calib, p.model.preprocess)

    plans = make_plans(p.layers, p.ranges, quant)
    plans, refined = refine(plans, p.layers, quant, p.model, opts.batch_size, calib_x)
    int8_mod = rewrite(p.imported.mod, plans, quant.simulate)
    calibration = replace(p.calibration, **refined)
    applied = replace(  # what was built, for the report's config and definition
        quant,
        weight_rounding=quant.weight_rounding
        if refined["weight_rounding"].startswith("gptq")
        else "nearest",
        bias_correction=refined["bias_correction"].startswith("on"),
    )
    p = replace(p, quant=applied, plans=plans, int8_mod=int8_mod, calibration=calibration)
    p = replace(p, int8_kernels=_int8_kernels_info(p, quant.simulate))
    return p, f"{sum(plan.quantized for plan in plans)} of {len(p.layers)} layers in INT8"


def _int8_kernels_info(p, simulate):
    """The report's ``int8_kernels`` (``Int8Kernels``): the CPU class and the INT8 layers by
    kernel path (``"conv2d avx2"``; ``"conv2d simulated"`` for a fake-quantized graph)."""
    target = p.target
    cpu_class = select.cpu_class(target) if target["kind"] == "llvm" else target["kind"]
    if simulate:
        quantized = zip(p.layers, p.plans, strict=True)
        paths = Counter(f"{layer.op} simulated" for layer, plan in quantized if plan.quantized)
    elif target["kind"] == "llvm":
        paths = select.kernel_paths(p.int8_mod, target)
        paths = {k.removeprefix("int8 "): v for k, v in paths.items() if k.startswith("int8 ")}
    else:
        paths = {}
    return Int8Kernels(cpu_class=cpu_class, paths=dict(sorted(paths.items())))


def graphs(p):
    """The (name, Relax module) pairs a ``Prepared`` run builds: TVM FP32 and TVM INT8."""
    return (("tvm_fp32", p.imported.mod), ("tvm_int8", p.int8_mod))


def tuning_databases(opts, target, fresh=None):
    """(the database folders the builds apply, the report's ``tuning``: a ``TuningInfo``
    without ``kernels``); ``fresh``: {graph name: ``TuneSummary``} of a tuning done by this
    run, or None."""
    folders, source = tuning.databases(opts.tuning_db, target)
    user, pretuned = tuning.db_dir(opts.tuning_db, target), tuning.pretuned_dir(target)
    left_out, damage = dbfiles.damage(user)
    info = TuningInfo(
        source=("fresh tuning + " if any(s.tuned for s in (fresh or {}).values()) else "") + source,
        database=str(user),
        records=tuning.record_count(user),
        pretuned_database=str(pretuned) if pretuned else None,
        pretuned_records=tuning.record_count(pretuned) if pretuned else 0,
        fresh={name: asdict(s) for name, s in fresh.items()} if fresh else {},
        left_out=left_out,
        damage=damage,
        unchecked=dbfiles.unchecked(user),
    )
    return folders, info


def tuning_remote(opts):
    """The ``remote.Remote`` whose devices measure tuning candidates, or None: here.

    Raises:
        UserError: ``--rpc`` (MetaSchedule's RPC runner asks a tracker for its devices).
    """
    from ..core.remote import parse_remote

    remote = parse_remote(opts.rpc, opts.rpc_tracker, opts.rpc_key)
    if remote is not None and remote.tracker is None:
        raise UserError(
            f"--rpc {opts.rpc}: tuning on a remote device needs a tracker (MetaSchedule's RPC "
            "runner asks one for devices): --rpc-tracker HOST:PORT --rpc-key KEY"
        )
    return remote


def _calibrate(p):
    """(ranges, the report's ``calibration``: a ``CalibrationInfo`` before the INT8
    rewrite) of a ``Prepared`` before calibration: from the cache, else measured and
    cached."""
    opts, model, images, split = p.opts, p.model, p.images, p.split
    mod, layers, q = p.imported.mod, p.layers, opts.quant
    # the observer graph runs here: on this CPU when the builds run elsewhere or nowhere
    here = p.device is None and not opts.build_only
    target = p.target if here else targets.Llvm.host(opts.threads)
    databases = p.databases if here else ()
    key = cache_key(
        model=model.name,
        graph=frontend.graph_digest(mod),
        weights=model.weights_digest,
        data=images.content_digest(split.calib),
        mode=q.calib_mode,
        params=q.collector_params(),
        batch_size=opts.batch_size,
        preprocess=model.preprocess.as_dict(),
    )
    ranges = load_cached(opts.cache_dir, key, range_names(mod, layers))
    info = CalibrationInfo(
        cache_key=key,
        cache_dir=str(opts.cache_dir),
        cache_hit=ranges is not None,
        images=len(split.calib),
        mode=q.calib_mode,
        params=q.collector_params(),
    )
    if ranges is not None:
        return ranges, info
    t0 = time.time()
    batches = data.full_batches(images, split.calib, model, opts.batch_size)
    total = -(-len(split.calib) // opts.batch_size)
    observer = observer_runner(mod, target, model.input_shape, opts.batch_size, databases)
    ranges = calibrate_module(
        observer, mod, layers, batches, q.calib_mode, q.collector_params(), total
    )
    info = replace(info, seconds=round(time.time() - t0, 2))
    save_cached(
        opts.cache_dir,
        key,
        ranges,
        {"model": model.name, "weights": model.weights, "data": images.name, **info.to_json()},
    )
    return ranges, info
