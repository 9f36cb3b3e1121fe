"""Run calibration batches through the observer graph and cache the ranges.

The cache lives in ``<cache_dir>/<key>.json``; the key is a sha256 over everything the
ranges depend on: what the graph computes (``frontend.graph_digest``: operators, shapes,
weights, TVM version), model name and weights digest, the decoded calibration pixels in
order, preprocessing, mode and its parameters, batch size and the cache format version.

``CalibrationInfo`` is how the ranges were found: the report's ``calibration`` section.
"""

import hashlib
import json
import logging
import math
from dataclasses import dataclass, fields
from pathlib import Path

from tqdm import tqdm

from ..core.atomic import write_json
from ..core.schema import need
from .collectors import Range, make_collector

log = logging.getLogger(__name__)
CACHE_VERSION = 7  # 3: residual outputs (graph.ResidualOutput); 4: pool inputs; 5: clipped;
# 6: no clipping counted in the top bin when the range reaches the largest value; 7: entries
# carry the checksum of their ranges (``load_cached``)


@dataclass(frozen=True)
class CalibrationInfo:
    """How a run's activation ranges were found: ``report.json``'s ``calibration``.

    Attributes:
        cache_key: the ranges' cache key (``cache_key``: 24 hex digits of a sha256).
        cache_dir: the cache folder (the ranges are in ``<cache_dir>/<cache_key>.json``).
        cache_hit: the ranges came from the cache (nothing was measured).
        images: calibration images.
        mode: the calibration mode (``collectors.MODES``).
        params: the mode's collector parameters ({name: value}, ``QuantConfig.collector_params``).
        seconds: wall time of the measurement, s; None on a cache hit (the JSON leaves it out).
        weight_rounding: the weight rounding as built, in words (``refine.refine``: ``"nearest"``,
            ``"gptq (32 images, 20 of 20 layers)"``, ``"nearest (GPTQ ...)"`` when skipped);
            None before the INT8 rewrite (the JSON leaves it out).
        bias_correction: the bias correction as built, in words (``"off"``, ``"on (32
            images)"`` or why it was skipped); None as ``weight_rounding``.
    """

    cache_key: str
    cache_dir: str
    cache_hit: bool
    images: int
    mode: str
    params: dict
    seconds: float | None = None
    weight_rounding: str | None = None
    bias_correction: str | None = None

    OPTIONAL = ("seconds", "weight_rounding", "bias_correction")  # left out of the JSON when None

    def to_json(self):
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v for k, v in d.items() if k not in self.OPTIONAL or v is not None}

    @classmethod
    def from_json(cls, d, where="calibration"):
        """Read the dict back; ``seconds``, ``weight_rounding`` and ``bias_correction`` may
        be absent (a cache hit; reports before the refinements).

        Raises:
            UserError: another field is missing; the message names it.
        """
        optional = {k: d.get(k) for k in cls.OPTIONAL} if isinstance(d, dict) else {}
        required = [f.name for f in fields(cls) if f.name not in cls.OPTIONAL]
        return cls(**{k: need(d, k, where) for k in required}, **optional)


def cache_key(**parts):
    """sha256 hex of the JSON of ``parts`` (sorted keys) and the cache version."""
    text = json.dumps({"cache_version": CACHE_VERSION, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def load_cached(cache_dir, key, names):
    """Ranges by layer name from the cache, or None on a miss or an entry that fails its
    checks: its checksum (``sha256`` of the ranges' canonical JSON: a hand edit or a damaged
    file), its key, a range for every name of ``names`` (``range_names``), each finite and
    ordered (lo <= hi). A failed entry is recalibrated, with a warning saying why."""
    path = Path(cache_dir) / f"{key}.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        if data.get("sha256") != _checksum(data["ranges"]):
            raise ValueError("its checksum does not match its ranges")
        if data["meta"].get("cache_key") != key:
            raise ValueError(f"written for key {data['meta'].get('cache_key')}")
        ranges = {name: Range(**r) for name, r in data["ranges"].items()}
        missing = [n for n in names if n not in ranges]
        if missing:
            raise ValueError(f"no range for {', '.join(missing[:3])}")
        if not all(
            math.isfinite(r.lo) and math.isfinite(r.hi) and r.lo <= r.hi for r in ranges.values()
        ):
            raise ValueError("a range is not finite or not ordered")
        return ranges
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        log.warning("calibration cache %s unreadable (%s); recalibrating", path, e)
        return None


def save_cached(cache_dir, key, ranges, meta):
    """Write ranges, their provenance and their checksum to the cache atomically; a cache
    that cannot be written is warned about and the run goes on."""
    path = Path(cache_dir) / f"{key}.json"
    payload = {n: r.to_dict() for n, r in ranges.items()}
    try:
        write_json(path, {"meta": meta, "ranges": payload, "sha256": _checksum(payload)})
    except OSError as e:
        log.warning("calibration cache %s not written (%s); the run goes on", path, e)


def _checksum(ranges):
    """sha256 hex of the canonical JSON (sorted keys, no spaces) of a cache's ranges."""
    text = json.dumps(ranges, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def range_names(mod, layers):
    """The names ``calibrate_module`` gives ranges under: each layer's, each residual
    output's and each pooled input's (see there)."""
    from ..model.graph import GlobalPool, ResidualOutput, global_pools, residual_outputs

    names = [layer.name for layer in layers]
    names += [ResidualOutput.range_name(names[r.layer]) for r in residual_outputs(mod)]
    names += [
        GlobalPool.range_name(names[p.layer]) for p in global_pools(mod) if p.layer is not None
    ]
    return names


def calibrate_module(observer, mod, layers, batches, mode, params, total=None):
    """Compute each layer's input range of ``mod``, and each residual output's
    (``graph.residual_outputs``) and pooled input's (``graph.global_pools`` read by a layer),
    from the activations ``observer`` returns.

    Args:
        observer: a runner of ``graph.observer_module(mod)`` (``runners.observer_runner``:
            built for the target the ranges are measured on).
        mod: FP32 ``tvm.IRModule`` (``frontend.import_model``).
        layers: its ``graph.Layer`` list.
        batches: iterable of (x, n_valid): x float32 (batch_size, C, H, W), rows past
            n_valid are padding and ignored.
        mode: one of ``collectors.MODES``; params: its keyword arguments
            (``QuantConfig.collector_params()``: ``percentile``, ``global_scale``).
        total: number of batches, for the progress bar.

    Returns:
        ``Range`` by layer name, by ``ResidualOutput.range_name(layer name)`` for the
        residual output of a layer, and by ``GlobalPool.range_name(layer name)`` for the
        input of the global average pool a layer reads.
    """
    names = range_names(mod, layers)
    return collect_ranges(observer, batches, names, mode, params, total)


def _valid_rows(act, batch_size, n_valid):
    """The rows of a layer input ``act`` that come from the ``n_valid`` real images of a
    batch of ``batch_size``: (N, ...) inputs keep their first ``n_valid``; a matmul input
    flattened to (N*T, K) (a Linear on a 3-D tensor) keeps its first ``n_valid * T`` rows.
    All of ``act`` when nothing is padding, or when its rows do not split by image."""
    rows = act.shape[0]
    if n_valid == batch_size or rows % batch_size:
        return act
    return act[: n_valid * (rows // batch_size)]


def collect_ranges(observer, batches, names, mode, params, total=None):
    """Feed calibration batches through ``observer`` and compute one range per observed
    tensor.

    Args:
        observer: a runner whose ``infer_all(x)`` returns (output, input of layer 0, ...),
            built from ``graph.observer_module``.
        names: the name of each observed tensor, in the observer's output order.
        batches: iterable of (x, n_valid), x float32 (N, C, H, W) full-size.
        mode, params: calibration mode and collector parameters.
        total: number of batches, for the progress bar.

    Returns:
        ``Range`` by name.
    """
    collectors = [make_collector(mode, **params) for _ in names]
    for b, (x, n_valid) in enumerate(
        tqdm(
            batches,
            total=total,
            desc=f"calibrate ({mode})",
            unit="batch",
            leave=False,
            disable=None,
        )
    ):
        outputs = observer.infer_all(x)[1:]
        for collector, act in zip(collectors, outputs, strict=True):
            collector.update(_valid_rows(act, len(x), n_valid), batch=b)
    return {name: c.compute_range() for name, c in zip(names, collectors, strict=True)}
