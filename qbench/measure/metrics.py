"""Comparison metrics: latency statistics, top-k agreement, accuracy, logit error, and the
kind of output a model returns with the space its error is judged in (``output_kind``,
``judged``)."""

import numpy as np

from .intervals import clopper_pearson

TOP5 = 5
NEAR_TIE_MARGIN = 0.05  # softmax top-1 minus top-2 of PyTorch FP32; see ``flip_metrics``

# What a model's (N, K) output is (``output_kind``), and the space its error is judged in
# (``judged_space``): a distribution over K >= 2 classes (logits, probabilities, percentages,
# log-probabilities) is judged as centred logits; independent per-class probabilities (a
# model ending in a sigmoid) as their log-odds (``judged``).
LOGITS, PROBABILITIES, LOG_PROBABILITIES = "logits", "probabilities", "log-probabilities"
PERCENTAGES = "percentages"  # probabilities x 100: rows that sum to 100
SIGMOIDS = "independent probabilities"  # a sigmoid per class: rows not a distribution
SIGMOID_OP = "relax.sigmoid"  # the Relax op of a model that ends in a sigmoid
SINGLE = "single value"  # K = 1: no distribution over classes
CENTRED, LOG_ODDS, AS_IS = "centred logits", "log-odds", "as is"
OVER_IMAGES = "each value less the reference's mean over the images"  # K = 1
NO_SPREAD = (  # why a single value's SQNR and cosine are not computed (``compare_logits``)
    "the reference's single value is the same on every image (one image, or an output that "
    "ignores its input): nothing varies to judge the INT8 error against"
)
ROWS, ALL_VALUES = "rows", "all values"  # what a cosine is taken over (``cosine_over``)
# A float32 softmax row sums to 1 within K x 2^-24 (6e-5 for K = 1000), a log_softmax row's
# logsumexp is 0 within a few float32 steps: 1e-3 leaves room for compiled exp
# approximations, while a row that sums to 0.99 (a dropped class, label smoothing, sigmoids)
# is not a distribution.
ROW_TOLERANCE = 1e-3
NEGATIVE_TOLERANCE = 1e-6  # how far under 0 a probability may round
PROBABILITY_FLOOR = float(np.finfo(np.float32).tiny)  # the smallest normal float32 probability
# float32 resolves 1 - p only down to 2^-24 (sigmoid(z) rounds to 1.0 for z > 16.6): a
# sigmoid's log-odds are recoverable within +-16.6, and are clipped there on both sides.
SIGMOID_EPS = 2.0**-24
ROW_SUMS = {PROBABILITIES: 1.0, PERCENTAGES: 100.0}


def output_kind(ref, ends_in=None):
    """What the reference output ``ref`` (N, K) holds, by its values and the op that
    computes it (``ends_in``: ``model.graph.output_op``, e.g. ``relax.sigmoid``).

    ``probabilities`` (``percentages``): K >= 2, every value >= -``NEGATIVE_TOLERANCE`` and
    every row sums to 1 (100) within ``ROW_TOLERANCE`` relative; ``log-probabilities``:
    K >= 2 and every row's logsumexp is 0 within ``ROW_TOLERANCE``; ``independent
    probabilities``: K >= 2, no distribution, the model ends in a sigmoid (``ends_in``
    ``SIGMOID_OP``) and every value lies in [0, 1] (values alone cannot tell sigmoids from
    logits that happen to lie in (0, 1]); ``single value``: K = 1; otherwise ``logits``
    (also when ``ref`` holds NaN or infinity: such a reference is no distribution).
    """
    z = np.asarray(ref, np.float64)
    if z.ndim != 2 or z.shape[1] < 2:
        return SINGLE if z.ndim == 2 else LOGITS
    if z.size == 0 or not np.isfinite(z).all():
        return LOGITS
    for kind, total in ROW_SUMS.items():
        if z.min() >= -NEGATIVE_TOLERANCE * total and _rows_sum_to(z, total):
            return kind
    if np.all(np.abs(logsumexp(z)) <= ROW_TOLERANCE):
        return LOG_PROBABILITIES
    if ends_in == SIGMOID_OP and z.min() >= 0 and z.max() <= 1:
        return SIGMOIDS
    return LOGITS


def _rows_sum_to(z, total):
    return bool(np.all(np.abs(z.sum(1) - total) <= ROW_TOLERANCE * total))


def logsumexp(z):
    """Per row, log(sum(exp(z))), (N,) float64; ``z`` (N, K) finite."""
    z = np.asarray(z, np.float64)
    top = z.max(1)
    return top + np.log(np.exp(z - top[:, None]).sum(1))


def judged_space(kind):
    """The space an output of ``kind`` (``output_kind``) is judged in: ``centred logits``,
    ``log-odds`` for independent probabilities, or, for a single value, each value less the
    reference's mean over the images (``judged_pair``)."""
    return {SINGLE: OVER_IMAGES, SIGMOIDS: LOG_ODDS}.get(kind, CENTRED)


def output_of(results):
    """(what the model's output is, the space its error was judged in) of a run's
    {runner name: ``results.RunnerResult``}: PyTorch FP32's ``output_kind`` metric and the
    ``judged_space`` TVM INT8's metrics record (a report from before single values were
    centred says ``as is``), else the one of that kind. A report from before outputs were
    told apart has no ``output_kind``: it read them as logits, judged as is."""
    ref, int8 = results.get("pytorch_fp32"), results.get("tvm_int8")
    kind = ref.metrics.get("output_kind") if ref is not None else None
    recorded = int8.metrics.get("judged_space") if int8 is not None else None
    return (LOGITS, AS_IS) if kind is None else (kind, recorded or judged_space(kind))


def judged(out, kind):
    """``out`` (N, K) in the space its kind is judged in (``judged_space``), float64.

    Centred logits: each row minus its mean, of the logits themselves, of the
    log-probabilities, or of the log of the probabilities or percentages (clipped below at
    ``PROBABILITY_FLOOR`` x their row sum, so that an underflowed 0 stays finite). A
    softmax output's log is its logits less a per-row constant, and so is a log_softmax
    output or the log of percentages: these kinds of one model land on the same values,
    and no per-row constant (such as logsumexp) can inflate or shrink the signal. The
    softmax of centred logits is the model's softmax.

    Log-odds: log(p / (1 - p)) of each independent probability p, the logit a sigmoid was
    given, with p clipped to [``SIGMOID_EPS``, 1 - ``SIGMOID_EPS``] (|log-odds| <= 16.6);
    not centred, since each value stands alone. A single value (K = 1) is returned as is:
    ``judged_pair`` takes the reference's mean over the images from it.
    """
    z = np.asarray(out, np.float64)
    space = judged_space(kind)
    if space in (AS_IS, OVER_IMAGES):
        return z
    if space == LOG_ODDS:
        p = np.clip(z, SIGMOID_EPS, 1 - SIGMOID_EPS)
        return np.log(p) - np.log1p(-p)
    if kind in ROW_SUMS:
        z = np.log(np.maximum(z, PROBABILITY_FLOOR * ROW_SUMS[kind]))
    return z - z.mean(1, keepdims=True)


def judged_pair(ref, out, kind):
    """``ref`` and ``out`` (N, K) in the space ``kind`` is judged in (``judged``), float64;
    a single value (K = 1) then less ``ref``'s mean over the N images, from both: an offset
    shared by every image (a bias of 50 on a value that varies by 1) would otherwise be
    most of the signal, and an INT8 output unrelated to the reference would show a cosine
    near 1 and a high SQNR. Where nothing varies (one image), ``compare_logits`` computes
    no SQNR or cosine (``NO_SPREAD``)."""
    r, o = judged(ref, kind), judged(out, kind)
    if kind == SINGLE:
        mean = r.mean()
        r, o = r - mean, o - mean
    return r, o


def latency_stats(samples_ms):
    """Summary of latency samples.

    Args:
        samples_ms: per-run latencies, ms.
    Returns:
        dict with ``median_ms``, ``p90_ms``, ``mean_ms``, ``std_ms`` and ``runs``. Whether a
        run is NOISY is judged on its ratios' confidence intervals (``speed.speed``).
    """
    s = np.asarray(samples_ms, dtype=np.float64)
    std = float(s.std(ddof=1)) if s.size > 1 else 0.0
    return {
        "median_ms": float(np.median(s)),
        "p90_ms": float(np.percentile(s, 90)),
        "mean_ms": float(s.mean()),
        "std_ms": std,
        "runs": int(s.size),
    }


def topk(logits, k):
    """Indices of the k largest logits per row, (N, k) int64, in descending order."""
    return np.argsort(-logits, axis=1, kind="stable")[:, :k]


def top1_agreement(ref, out):
    """Fraction in [0, 1] of rows whose arg-max class equals the reference's."""
    return float(np.mean(ref.argmax(1) == out.argmax(1)))


def top5_agreement(ref, out):
    """Mean overlap in [0, 1] of the top-5 class sets of ``out`` and ``ref`` (|A & B| / 5)."""
    k = min(TOP5, ref.shape[1])
    a, b = topk(ref, k), topk(out, k)
    return float(np.mean([len(set(r) & set(o)) / k for r, o in zip(a, b, strict=True)]))


def accuracy(logits, labels, k):
    """Top-k accuracy in [0, 1] against integer labels (N,); a row holding NaN or infinity
    is wrong (its ranking means nothing)."""
    finite = np.isfinite(logits).all(1)
    hits = [lab in row for lab, row in zip(labels, topk(logits, k), strict=True)]
    return float(np.mean(np.asarray(hits) & finite))


def mean_row_cosine(ref, out):
    """The mean over rows (images) of each row's cosine similarity of ``out`` and ``ref``,
    float in [-1, 1], whatever the logits' magnitude (each row is scaled to unit length
    first); a row where both are all zero counts as 1.0, where only one is as 0.0 (an
    output of equal logits, which says nothing, does not match the reference's direction).
    (``diagnose.energy``'s ``Energy.cosine`` is one cosine of all values flattened
    instead.)

    Args:
        ref, out: logits (N, K), float.
    """
    a, b = _unit_rows(ref), _unit_rows(out)
    left, right = a.any(1), b.any(1)
    return float(np.mean(np.where(left & right, (a * b).sum(1), np.where(left | right, 0.0, 1.0))))


def cosine_over(kind, classes):
    """What the logits cosine of an output of ``kind`` with ``classes`` values a row is
    taken over: ``rows`` (the mean of each image's cosine), or ``all values`` (one cosine of
    the (N x K) values flattened) where a row has one degree of freedom in its judged space
    (``judged_space``): a single value, or two centred logits (a, -a). Such a row's cosine is
    only +-1, the sign agreement that top-1 agreement already counts, and a mean of them
    could not show a fidelity loss."""
    free = classes - (judged_space(kind) == CENTRED)
    return ALL_VALUES if free <= 1 else ROWS


def _unit_rows(x):
    """Each row of ``x`` (N, K) scaled to unit length, float64; an all-zero row stays zero.
    Rows are first divided by their largest magnitude, so that logits of any size (1e-160:
    their squares would underflow) give the same direction."""
    x = np.asarray(x, np.float64)
    top = np.abs(x).max(1, keepdims=True)
    x = np.divide(x, top, out=np.zeros_like(x), where=top > 0)
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)


def sqnr_db_or_none(ref, out):
    """The signal-to-quantization-noise ratio of ``out`` against ``ref`` over all their
    values, 10 log10(sum(ref^2) / sum((ref - out)^2)), dB; None when they are identical (no
    noise), -inf when ``ref`` is all zero and ``out`` is not. (``diagnose.energy``'s
    ``Energy.sqnr_db`` gives inf for identical values instead.)

    Args:
        ref, out: logits (N, K), float.
    """
    noise = float(((ref - out) ** 2).sum())
    return None if noise == 0 else float(10 * np.log10((ref**2).sum() / noise))


def softmax_margin(logits):
    """Per row, the softmax probability of the top-1 class minus that of the top-2 class:
    (N,) float64 in [0, 1]; 0 for a tie. ``logits`` (N, K), K >= 2."""
    z = np.asarray(logits, np.float64)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    top2 = np.sort(p, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def flips(ref, out, margin=NEAR_TIE_MARGIN):
    """The images whose top-1 class in ``out`` differs from the reference's, each with its
    reference margin (``softmax_margin``) and kind: ``near-tie`` when the margin is under
    ``margin``, else ``decisive``.

    A near-tie flip follows float rounding: on efficientnet_lite0 (32 calibration, 218
    evaluation photos of ``../shared/data/imagenet-sample``) the default build's flips had
    margins 0.006-0.018 and ``max`` calibration's 0.006-0.13, while 5 % of all images have a
    margin under 0.059; the default 0.05 sets those apart and leaves 95 % of the images able
    to count as decisive.

    Args:
        ref, out: logits (N, K), K >= 2, finite.
        margin: the near-tie margin, a probability in [0, 1].
    Returns:
        list of dicts in evaluation order: ``index`` (position in the evaluated images),
        ``pytorch_class``, ``class`` (the runner's), ``margin``, ``kind``.
    """
    a, b = np.asarray(ref).argmax(1), np.asarray(out).argmax(1)
    m = softmax_margin(ref)
    return [
        {
            "index": int(i),
            "pytorch_class": int(a[i]),
            "class": int(b[i]),
            "margin": round(float(m[i]), 6),
            "kind": "near-tie" if m[i] < margin else "decisive",
        }
        for i in np.flatnonzero(a != b)
    ]


def flip_metrics(flipped, margins, margin):
    """``near_tie_flips``, ``decisive_flips`` (counts), ``decisive_top1_agreement`` (the
    fraction in [0, 1] of the images without a decisive flip) of ``flips``'s list,
    ``decisive_images`` (how many images have a reference margin of at least ``margin``:
    only they can flip decisively; with none, decisive agreement cannot fall below 1) and
    the ``near_tie_margin`` it was split at.

    Args:
        margins: the reference's ``softmax_margin`` per image, (N,).
    """
    decisive = sum(f["kind"] == "decisive" for f in flipped)
    return {
        "near_tie_margin": margin,
        "near_tie_flips": len(flipped) - decisive,
        "decisive_flips": decisive,
        "decisive_top1_agreement": 1.0 - decisive / len(margins),
        "decisive_images": int((np.asarray(margins) >= margin).sum()),
    }


def compare_logits(ref, out, labels=None, margin=NEAR_TIE_MARGIN, kind=None):
    """All accuracy metrics of ``out`` (N, K) against the PyTorch reference ``ref`` (N, K).

    When ``out`` or ``ref`` holds NaN or infinity, only ``nonfinite_logits`` (``out``'s
    count) is meaningful and both agreements are reported as 0. A single logit (K = 1) has
    no ranking, so no top-1/top-5 agreement is computed (every view then shows none, not a
    vacuous 100 %). Every fraction comes with its counts (see ``with_counts``); flips are
    split at the near-tie ``margin`` (``flips``).

    ``max_abs_diff``, ``cosine``, ``sqnr_db`` and the flips' margins are computed on both
    outputs mapped to the space ``kind`` is judged in (``judged``), named by
    ``judged_space``; the cosine over rows or over all values (``cosine_over``); agreement
    and accuracy rank the outputs as given (the mapping keeps each row's order).

    Args:
        kind: what ``ref`` holds (``output_kind``), or None to tell it from ``ref``.
    """
    ref, out = np.asarray(ref, np.float64), np.asarray(out, np.float64)
    kind = output_kind(ref) if kind is None else kind
    nonfinite = int((~np.isfinite(out)).sum())
    ranked = ref.shape[1] > 1
    if nonfinite or not np.isfinite(ref).all():
        # NaN rows would agree with argmax 0 and fake a cosine: report only the count
        zero = {"top1_agreement": 0.0, "top5_agreement": 0.0} if ranked else {}
        return with_counts({"nonfinite_logits": nonfinite, **zero}, ref.shape)
    m = {"nonfinite_logits": 0}
    r, o = judged_pair(ref, out, kind)
    if ranked:
        m["top1_agreement"] = top1_agreement(ref, out)
        m["top5_agreement"] = top5_agreement(ref, out)
        m |= flip_metrics(flips(r, o, margin), softmax_margin(r), margin)
    over = cosine_over(kind, ref.shape[1])
    flat = (r.reshape(1, -1), o.reshape(1, -1)) if over == ALL_VALUES else (r, o)
    spread = kind != SINGLE or r.any()  # else nothing of the reference to judge against
    m |= {
        "max_abs_diff": float(np.abs(r - o).max()),
        "cosine": mean_row_cosine(*flat) if spread else None,
        "cosine_over": over,
        "sqnr_db": sqnr_db_or_none(r, o) if spread else None,
        "judged_space": judged_space(kind),
    }
    if not spread:
        m["unjudged"] = NO_SPREAD
    if labels is not None:
        m.update(accuracy_metrics(out, labels))
    return with_counts(m, ref.shape)


SAME_OUTPUT_TOLERANCE = 2.5e-7  # of a value's own magnitude: 2 to 4 float32 ulps


def input_independent(ref):
    """Whether the reference's outputs ``ref`` (N, K), N >= 2, are the same for every image:
    a model that ignores its input, whose agreement and SQNR show nothing about
    quantization. Each value's spread over the images is at most ``SAME_OUTPUT_TOLERANCE``
    of that value's own largest magnitude (rounding: the same model computes the same row
    for every image of its padded batches, bit for bit), and the top-1 class is the same
    for every image (one that changes depends on the input, however little the values
    move). A constant offset of 1e5 with an input's variation of 1 on it, or a constant
    value of 1e5 beside one of 1e-2 that varies, depends on the input. False for one image
    or non-finite values."""
    ref = np.asarray(ref, np.float64)
    if ref.shape[0] < 2 or not np.isfinite(ref).all():
        return False
    if np.unique(ref.argmax(axis=1)).size > 1:
        return False
    spread = np.ptp(ref, axis=0)
    return bool((spread <= SAME_OUTPUT_TOLERANCE * np.abs(ref).max(axis=0)).all())


def input_ignoring(ref, kind):
    """What the best output that ignores its input scores against the reference ``ref``
    (N, K) of ``kind`` (``output_kind``): the top-1 agreement of always answering the
    class most often the reference's top-1, the top-5 agreement of always answering the 5
    classes most often in its top 5, and the SQNR (dB) and cosine, computed as
    ``compare_logits`` does, of always answering the reference's mean over the images in
    the judged space (the constant of least squared error there). A check such an output
    passes shows nothing about quantization: a per-class offset every image shares (a
    large bias, a constant input to the classifier) can be most of the signal, and an INT8
    build that lost the input would pass it (``signoff.checks``). {} for fewer than 2
    images or non-finite values."""
    ref = np.asarray(ref, np.float64)
    n, classes = ref.shape
    if n < 2 or not np.isfinite(ref).all():
        return {}
    out = {}
    if classes > 1:
        out["top1_agreement"] = float(np.bincount(ref.argmax(1)).max() / n)
        k = min(TOP5, classes)
        tops = topk(ref, k)
        counts = np.bincount(tops.ravel(), minlength=classes)
        best = set(np.argsort(-counts, kind="stable")[:k].tolist())
        out["top5_agreement"] = float(np.mean([len(set(row) & best) / k for row in tops]))
    r, _ = judged_pair(ref, ref, kind)
    constant = np.broadcast_to(r.mean(0), r.shape)
    over = cosine_over(kind, classes)
    flat = (r.reshape(1, -1), constant.reshape(1, -1)) if over == ALL_VALUES else (r, constant)
    out["cosine"] = mean_row_cosine(*flat)
    noise = float(((r - constant) ** 2).sum())
    out["sqnr_db"] = float(10 * np.log10((r**2).sum() / noise)) if noise > 0 else float("inf")
    return out


def accuracy_metrics(logits, labels):
    """``top1_accuracy`` and ``top5_accuracy`` in [0, 1], with their counts, and
    ``labels_present``: the distinct labels among the images (for the chance level)."""
    m = {
        "top1_accuracy": accuracy(logits, labels, 1),
        "top5_accuracy": accuracy(logits, labels, TOP5),
    }
    return with_counts(m, np.shape(logits)) | {"labels_present": int(len(np.unique(labels)))}


def with_counts(metrics, logits_shape):
    """Add ``<key>_count`` and ``<key>_total`` beside each fraction ``<key>`` in ``metrics``,
    and ``<key>_ci95``: its 95 % Clopper-Pearson interval [low, high] (``intervals``).

    Totals are images for top-1 agreement and accuracies, and class slots (k = min(5, K)
    per image) for top-5 agreement; a count is fraction x total, rounded. The interval
    counts images, the independent trials (a top-5 agreement's share of an image's classes
    rounded to whole images).

    Args:
        metrics: dict of metrics; the keys it lacks are skipped.
        logits_shape: (N, K) of the compared logits.
    Returns:
        the same dict, updated.
    """
    images, classes = logits_shape
    totals = {
        "top1_agreement": images,
        "decisive_top1_agreement": images,
        "top5_agreement": min(TOP5, classes) * images,
        "top1_accuracy": images,
        "top5_accuracy": images,
    }
    for key, total in totals.items():
        if key in metrics:
            metrics[f"{key}_count"] = round(metrics[key] * total)
            metrics[f"{key}_total"] = total
            low, high = clopper_pearson(round(metrics[key] * images), images)
            metrics[f"{key}_ci95"] = [round(low, 6), round(high, 6)]
    return metrics


def per_image(ref, out, labels=None, margin=NEAR_TIE_MARGIN, kind=None):
    """Per-image 0/1 outcomes in evaluation order, for paired tests (McNemar).

    Args:
        ref: PyTorch reference logits (N, K); ``out`` is ``ref`` itself for PyTorch.
        out: a runner's logits (N, K).
        labels: integer labels (N,), or None for unlabelled data.
        margin: the near-tie margin of ``flips``.
        kind: what ``ref`` holds (``output_kind``; None: told from ``ref``): the flips'
            margins are taken in its judged space (``judged``), as ``compare_logits``'s.
    Returns:
        dict: ``top1_match`` (list of N ints, 1 where ``out``'s top-1 class is ``ref``'s),
        absent when ``out is ref`` or K = 1 (a single logit has no top-1 class);
        ``top1_correct`` (1 where the top-1 class is the label)
        when labelled. Both are all 0 when ``out`` holds NaN or infinity (as
        ``compare_logits``, which then reports no agreement). ``flips``: ``flips``'s list,
        beside ``top1_match`` when ``out`` is finite.
    """
    finite = np.isfinite(out).all() and np.isfinite(ref).all()
    top1 = out.argmax(1) if np.isfinite(out).all() else np.full(len(out), -1)
    result = {}
    if out is not ref and ref.shape[1] > 1:
        result["top1_match"] = (
            (top1 == ref.argmax(1)).astype(int).tolist() if finite else [0] * len(out)
        )
        if finite:
            kind = output_kind(ref) if kind is None else kind
            result["flips"] = flips(judged(ref, kind), judged(out, kind), margin)
    if labels is not None:
        result["top1_correct"] = (top1 == np.asarray(labels)).astype(int).tolist()
    return result
