"""``qbench run``: model -> Relax -> calibration -> INT8 rewrite -> builds -> comparison."""

import logging
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace

import numpy as np
from tqdm import tqdm

from .. import data
from ..calibration.calibrate import cache_key, calibrate_module, load_cached, save_cached
from ..compile import build, targets, tuning
from ..compile.kernels import select
from ..core.atomic import check_writable
from ..core.errors import UserError
from ..core.progress import random_weights_warning, say, stage
from ..measure import speed, timing
from ..measure.metrics import accuracy_metrics, compare_logits, latency_stats, per_image
from ..measure.results import Latency, RunnerResult
from ..measure.runners import RemoteTVMRunner, TorchRunner, TVMRunner, observer_runner
from ..model import frontend, graph, zoo
from ..quantize import QuantConfig
from ..quantize.plan import check_skip_layers, fp32_reasons, make_plans
from ..quantize.refine import refine
from ..quantize.rewrite import rewrite
from ..signoff.checks import Limits, signoff
from .prepared import Prepared

log = logging.getLogger(__name__)


@dataclass
class RunOptions:
    """Everything ``qbench run`` takes; see ``qbench run --help`` for each field.

    The sign-off thresholds (``min_top1_agreement``, ``max_accuracy_drop``, ``min_sqnr_db``
    in dB, ``min_cosine`` in [-1, 1], ``min_top5_agreement`` a fraction in [0, 1],
    ``min_int8_speedup`` a factor > 0, ``max_int8_latency_ms`` ms > 0 or None) default
    to ``signoff.Limits``: 17 dB, 0.99 and 0.90 sit below what ``max`` and ``percentile``
    calibration measured on efficientnet_lite0 (19.4 dB, 0.995, 94.8 % on 100 sample
    photos) and above ``kl_divergence`` (14.1 dB, 0.980, 88.4 %); see its docstring.
    """

    model: str
    target: str = "llvm"
    data: str = None
    weights: str = None
    input_shape: tuple = None
    mean: tuple = None
    std: tuple = None
    calib_size: int = None
    eval_size: int = None
    batch_size: int = 8
    seed: int = 0
    threads: int = 2
    warmup: int = 3
    repeat: int = 20
    min_top1_agreement: float = Limits.min_top1_agreement
    max_accuracy_drop: float = Limits.max_accuracy_drop
    min_sqnr_db: float = Limits.min_sqnr_db
    min_cosine: float = Limits.min_cosine
    min_top5_agreement: float = Limits.min_top5_agreement
    min_int8_speedup: float = Limits.min_int8_speedup
    max_int8_latency_ms: float = Limits.max_int8_latency_ms
    min_decisive_top1_agreement: float = Limits.min_decisive_top1_agreement
    near_tie_margin: float = Limits.near_tie_margin
    cache_dir: str = "calibration"
    reports_dir: str = "reports"
    tuning_db: str = None  # None: ``tuning.default_root()``
    tune_trials: int = 0
    time_budget_min: float = None
    tune_graphs: tuple = ("fp32", "int8")
    holdout_size: int = 0  # images beyond calibration and evaluation (the fallback's)
    accuracy_target: float = None  # top-1 agreement the FP32 fallback must reach, or None
    diagnose: bool = False  # a per-layer diagnosis (run --diagnose, qbench diagnose)
    quant: QuantConfig = field(default_factory=QuantConfig)
    policy: dict = None  # the --policy file applied (``policy.applied``), or None
    rpc: str = None  # HOST:PORT of the RPC server that runs the TVM builds, or None
    rpc_tracker: str = None  # HOST:PORT of an RPC tracker whose ``rpc_key`` servers run them
    rpc_key: str = None
    build_only: bool = False  # qbench build: the target need not run here, nothing runs


def prepare(opts):
    """Everything before the builds: checks, model, data, import, calibration, INT8 rewrite.

    Returns:
        ``prepared.Prepared`` (no ``diagnosis`` yet).
    Raises:
        UserError: bad input, detected before any slow step where possible.
    """
    if opts.tuning_db is None:  # the API's default is the CLI's
        opts = replace(opts, tuning_db=str(tuning.default_root()))
    check_writable(opts.cache_dir, "--cache-dir")
    check_writable(opts.reports_dir, "--reports-dir")
    check_writable(opts.tuning_db, "--tuning-db")
    build.set_threads(opts.threads)
    device = _connect(opts)
    target = targets.parse_target(opts.target, opts.threads, device, not opts.build_only)
    needed = (opts.calib_size or 32) + (opts.eval_size or 100) + opts.holdout_size
    with stage("open data") as st:
        images = data.open_source(opts.data, opts.seed, needed)
        split = data.split(images, opts.calib_size, opts.eval_size, opts.seed)
        held = (
            data.holdout(images, split, opts.holdout_size, opts.seed) if opts.holdout_size else ()
        )
        data.check_decodable(images, split.calib + split.eval + held)
        st.note = f"{images.name}: {len(split.calib)} calibration, {len(split.eval)} evaluation"
    with stage("load model") as st:
        model = zoo.load_model(opts.model, opts.weights, opts.input_shape, opts.mean, opts.std)
        st.note = f"weights: {model.weights}"
    if model.random_weights:
        say(random_weights_warning(model.name))
    with stage("import to Relax") as st:
        imported = frontend.import_model(model, opts.batch_size)
        frontend.check_logits(imported.mod, model.name)
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
    databases, tuning_info = _databases(opts, target)
    p = Prepared(opts, model, images, split, held, target, imported, layers, databases, tuning_info)
    unaccounted = graph.unaccounted_calls(imported.layer_calls, layers)
    p = replace(p, unaccounted=unaccounted, device=device)
    for path, n in p.unaccounted:
        say(
            f"WARNING: {path}: {n} call(s) of this Conv2d/Linear are no conv2d/matmul layer of "
            "the Relax graph (the export made another op pattern of them); they run in FP32"
        )
    with stage("calibration") as st:
        ranges, cal = _calibrate(p)
        miss = f"cache miss: {cal['mode']} on {cal['images']} images"
        st.note = "cache hit" if cal["cache_hit"] else miss
    log.info("calibration cache: %s/%s.json", cal["cache_dir"], cal["cache_key"])
    with stage("INT8 rewrite") as st:
        p, st.note = _int8_rewrite(replace(p, ranges=ranges, calibration=cal))
    _warn_about_kernels(p)
    return p


def _connect(opts):
    """The ``remote.Device`` of ``--rpc`` / ``--rpc-tracker``, or None (the builds run here).

    Raises:
        UserError: bad addresses, no such device, or an option that does not work with a
            remote device yet.
    """
    from ..core.remote import connect, parse_remote

    remote = parse_remote(opts.rpc, opts.rpc_tracker, opts.rpc_key)
    if remote is None:
        return None
    if opts.tune_trials:
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
    kernels in qbench (and the graph is not simulated), and that ``--reduce-range`` buys
    nothing on a target whose INT8 kernel is not the AVX2 one."""
    opts, target = p.opts, p.target
    cpu_class = p.int8_kernels["cpu_class"]
    if opts.quant.reduce_range and cpu_class != "AVX2":
        say(
            f"WARNING: --reduce-range on a CPU of class {cpu_class}: its INT8 kernels gain "
            "nothing from 7-bit weights (only AVX2 CPUs without VNNI do), which cost "
            "precision (about 3 dB of logits SQNR on efficientnet_lite0)"
        )
    no_fast_path = cpu_class == select.NO_FAST_PATH
    if no_fast_path and not opts.quant.simulate:
        say(
            f"WARNING: this target (mcpu {target.get('mcpu', 'default')}) has no INT8 fast path "
            "in qbench (needs one of: "
            f"{', '.join(select.cpu_classes())}): INT8 conv2d/matmul layers run on default "
            "schedules and will likely be slower than FP32"
        )


def _int8_rewrite(p):
    """Plan every layer with ``p.opts.quant``, refine the plans (``refine``: GPTQ rounding,
    bias correction), rewrite the INT8 graph and describe its kernels. Returns (a new
    ``Prepared`` with ``plans``, ``int8_mod``, ``int8_kernels``, ``calibration``'s
    ``weight_rounding`` and ``bias_correction``, and ``opts.quant`` as applied: nearest
    rounding and no bias correction where ``refine`` had to skip them; a note for the stage
    line)."""
    quant = p.opts.quant
    plans, refined = refine(p, make_plans(p.layers, p.ranges, quant))
    int8_mod = rewrite(p.imported.mod, plans, quant.simulate)
    calibration = {**p.calibration, **refined}
    applied = replace(  # what was built, for the report's config and definition
        quant,
        weight_rounding=quant.weight_rounding
        if refined["weight_rounding"].startswith("gptq")
        else "nearest",
        bias_correction=refined["bias_correction"].startswith("on"),
    )
    p = replace(p, opts=replace(p.opts, quant=applied))
    p = replace(p, plans=plans, int8_mod=int8_mod, calibration=calibration)
    p = replace(p, int8_kernels=_int8_kernels_info(p, quant.simulate))
    return p, f"{sum(plan.quantized for plan in plans)} of {len(p.layers)} layers in INT8"


def _diagnosed(p, attachments):
    """Diagnose every INT8 layer (``qbench diagnose``'s) and, with ``opts.accuracy_target``,
    rewrite the INT8 graph with the fallback's layers in FP32. With ``opts.diagnose`` the
    input histograms of the most sensitive layers ({file name: PNG bytes}) go into
    ``attachments`` (a dict, or None to drop them). Returns a new ``Prepared`` with
    ``diagnosis`` (and the fallback's ``opts``, plans and INT8 graph)."""
    from ..diagnose.run import diagnose_prepared

    opts = p.opts
    diagnosis, pngs = diagnose_prepared(p, opts.accuracy_target, plots=opts.diagnose)
    if attachments is not None:
        attachments.update(pngs)
    p = replace(p, diagnosis=diagnosis)
    kept = tuple(diagnosis.get("fallback", {}).get("kept_fp32", ()))
    if kept:
        p = replace(p, opts=replace(opts, quant=replace(opts.quant, fallback_layers=kept)))
        with stage("INT8 rewrite with the fallback") as st:
            p, st.note = _int8_rewrite(p)
    return p


def _int8_kernels_info(p, simulate):
    """The report's ``int8_kernels``: the CPU class and the INT8 layers by kernel path
    (``"conv2d avx2"``; ``"conv2d simulated"`` for a fake-quantized graph)."""
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
    return {"cpu_class": cpu_class, "paths": dict(sorted(paths.items()))}


def graphs(p):
    """The (name, Relax module) pairs a ``Prepared`` run builds: TVM FP32 and TVM INT8."""
    return (("tvm_fp32", p.imported.mod), ("tvm_int8", p.int8_mod))


def run(opts, attachments=None):
    """Execute the whole job and return its ``results.RunResult`` (``to_json()``: report.json).

    Args:
        opts: ``RunOptions``.
        attachments: a dict that receives the report's other files ({file name: bytes}:
            the diagnosis' input histogram PNGs with ``opts.diagnose``), or None.
    Raises:
        UserError: bad input, detected before any slow step where possible.
    """
    from ..report.assemble import build_report

    started = time.time()
    p = prepare(opts)
    if opts.accuracy_target is not None or opts.diagnose:
        p = _diagnosed(p, attachments)
        opts = p.opts
    if opts.tune_trials:
        with stage("tuning"):
            fresh = tune_graphs(p, opts.tune_trials, opts.time_budget_min, opts.tune_graphs)
        databases, tuning_info = _databases(opts, p.target, fresh)
        p = replace(p, databases=databases, tuning=tuning_info, device=_connect(opts))
    p, runners = _build_runners(p)
    model = p.model
    with stage("evaluation") as st:
        indices = p.split.eval
        logits, labels = _evaluate(runners, p.images, indices, model, opts.batch_size)
        st.note = f"{len(indices)} images"
    with stage("timing") as st:
        measured = _time(runners, p.images, p.split.eval, model, opts)
        st.note = timing.rounds(measured.protocol)
    latency = measured.samples_ms
    keys = [p.images.keys[i] for i in p.split.eval] if p.images.keys else None
    results = _results(runners, logits, labels, latency, opts.near_tie_margin, keys)
    timed = speed.speed(latency)
    quantized = sum(plan.quantized for plan in p.plans)
    classes = frontend.num_classes(p.imported.mod)
    verdict = signoff(
        results,
        Limits.of(opts),
        classes,
        model.random_weights,
        quantized,
        opts.quant.simulate,
        timed,
    )
    wall_s = time.time() - started
    return build_report(p, results, wall_s, timed, verdict, measured.protocol)


def _named(outcomes, keys):
    """``outcomes`` (``compare.per_image``) with each flip's ``image`` key added."""
    for f in outcomes.get("flips", []):
        f["image"] = str(keys[f["index"]]) if keys else None
    return outcomes


def _build_runners(p):
    """Build TVM FP32 and TVM INT8. Returns (a new ``Prepared`` whose ``tuning["kernels"]``
    holds {graph name: {schedule source: kernel count}}, the runners: PyTorch FP32 eager,
    TVM FP32, TVM INT8)."""
    opts, shape, target = p.opts, p.model.input_shape, p.target
    runners = [TorchRunner(p.model.module, opts.batch_size, shape)]
    kernels = {}
    for name, mod in graphs(p):
        with stage(f"build {name.upper().replace('_', ' ')}"):
            built = build.build(mod, target, p.databases, p.device, name)
        kernels[name] = built.schedule_counts
        log.info("%s kernels by schedule: %s", name, built.schedule_counts)
        if p.device is None:
            device = targets.device_for(target)
            runners.append(TVMRunner(built.vm, device, opts.batch_size, shape, name))
        else:
            runners.append(RemoteTVMRunner(built.vm, p.device, opts.batch_size, shape, name))
    return replace(p, tuning={**p.tuning, "kernels": kernels}), runners


def _databases(opts, target, fresh=None):
    """(the database folders the builds apply, the report's ``tuning`` dict); ``fresh``:
    {graph name: ``TuneSummary``} of a tuning done by this run, or None."""
    folders, source = tuning.databases(opts.tuning_db, target)
    user, pretuned = tuning.db_dir(opts.tuning_db, target), tuning.pretuned_dir(target)
    info = {
        "source": ("fresh tuning + " if any(s.tuned for s in (fresh or {}).values()) else "")
        + source,
        "database": str(user),
        "records": tuning.record_count(user),
        "pretuned_database": str(pretuned) if pretuned else None,
        "pretuned_records": tuning.record_count(pretuned) if pretuned else 0,
        "fresh": {name: asdict(s) for name, s in fresh.items()} if fresh else {},
    }
    return folders, info


def tune_graphs(p, trials_per_task, time_budget_min=None, which=("fp32", "int8")):
    """Tune the FP32 and INT8 graphs of a ``Prepared`` run into the user's database, measured
    on its tracker's devices when it has one (its own device's session is ended first, so
    that the tracker can lend that device to the tuner). Returns {graph name:
    ``tuner.TuneSummary``} (``_databases`` points builds at them)."""
    if p.device is not None:
        p.device.close()
    folder = tuning.db_dir(p.opts.tuning_db, p.target)
    deadline = time.time() + 60 * time_budget_min if time_budget_min else None
    summaries = {}
    for name, mod in graphs(p):
        if name.removeprefix("tvm_") not in which:
            continue
        summaries[name] = tuning.tune(
            mod, p.target, folder, trials_per_task, deadline, name, tuning_remote(p.opts)
        )
        if summaries[name].stopped:
            break
    return summaries


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
    """(ranges, the report's ``calibration`` dict) of a ``Prepared`` before calibration:
    from the cache, else measured and cached."""
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
        preprocess=asdict(model.preprocess),
    )
    ranges = load_cached(opts.cache_dir, key)
    info = {
        "cache_key": key,
        "cache_dir": str(opts.cache_dir),
        "cache_hit": ranges is not None,
        "images": len(split.calib),
        "mode": q.calib_mode,
        "params": q.collector_params(),
    }
    if ranges is not None:
        return ranges, info
    t0 = time.time()
    batches = data.full_batches(images, split.calib, model, opts.batch_size)
    total = -(-len(split.calib) // opts.batch_size)
    observer = observer_runner(mod, target, model.input_shape, opts.batch_size, databases)
    ranges = calibrate_module(observer, mod, layers, batches, q, total)
    info["seconds"] = round(time.time() - t0, 2)
    save_cached(
        opts.cache_dir,
        key,
        ranges,
        {"model": model.name, "weights": model.weights, "data": images.name, **info},
    )
    return ranges, info


def _evaluate(runners, images, indices, model, batch_size):
    logits = {r.name: [] for r in runners}
    labels = []
    batches = data.batches(images, indices, model.preprocess, batch_size)
    total = -(-len(indices) // batch_size)
    for x, y in tqdm(
        batches, total=total, desc="evaluate", unit="batch", leave=False, disable=None
    ):
        for r in runners:
            logits[r.name].append(r.infer(x))
        if y is not None:
            labels.append(y)
    logits = {k: np.concatenate(v) for k, v in logits.items()}
    return logits, (np.concatenate(labels) if labels else None)


def _time(runners, images, indices, model, opts):
    """``timing.Timed`` of one full batch per runner: ``opts.repeat`` samples each, ms,
    paired by round (``timing.time_runners``)."""
    x, _ = next(data.full_batches(images, indices[: opts.batch_size], model, opts.batch_size))
    return timing.time_runners(runners, x, opts.warmup, opts.repeat)


def _results(runners, logits, labels, latency, margin, keys=None):
    """{runner name: ``RunnerResult``}: latency, metrics against PyTorch FP32's logits
    (``ref``) and per-image outcomes, flips split at the near-tie ``margin`` and named by
    the evaluated images' ``keys`` (their files), where the data has them."""
    ref = logits["pytorch_fp32"]
    results = {}
    for r in runners:
        if r.name == "pytorch_fp32":
            metrics = accuracy_metrics(ref, labels) if labels is not None else {}
            metrics["nonfinite_logits"] = int((~np.isfinite(ref)).sum())
        else:
            metrics = compare_logits(ref, logits[r.name], labels, margin)
        results[r.name] = RunnerResult(
            name=r.name,
            latency=Latency(**latency_stats(latency[r.name])),
            samples_ms=tuple(latency[r.name]),
            metrics=metrics,
            per_image=_named(per_image(ref, logits[r.name], labels, margin), keys),
            device=r.device_name,
        )
    return results
