"""Graph clean-up before quantization: fold BatchNorm (and a conv bias before it) into conv2d.

An inference BatchNorm after ``y = conv2d(x, W)`` is ``y * s + t`` per output channel with
``s = gamma / sqrt(var + eps)`` and ``t = beta - mean * s`` (Ioffe and Szegedy, "Batch
Normalization", 2015, Algorithm 2), so it folds into ``conv2d(x, W * s) + t``. TVM's
``FoldBatchnormToConv2D`` does the same but emits s, t and ``W * s`` as Relax operators on
constants that ``FoldConstant`` then compiles one by one with LLVM (about 8 per BatchNorm,
~35 ms each: 16 s of efficientnet_lite0's import); qbench computes them in numpy inside the
pattern rewrite instead, with the same float32 operations in the same order, so the folded
constants are the ones TVM's pass gives.

TVM's pass matches only conv2d -> batch_norm. PyTorch convs with a bias import as
conv2d -> add(bias) -> batch_norm; ``batch_norm(conv + b) == batch_norm'(conv)`` with running
mean ``mean - b``, so the bias moves into the BatchNorm first. A BatchNorm after anything
else is decomposed into elementwise operators.
"""

import numpy as np


def bn_scale_shift(gamma, beta, mean, var, eps):
    """The per-channel affine map of an inference BatchNorm: ``bn(y) == y * scale + shift``.

    Args:
        gamma, beta, mean, var: float32 (C,) scale, offset, running mean and variance.
        eps: the BatchNorm epsilon, rounded to float32 as TVM's ``FoldBatchnormToConv2D``.
    Returns:
        (scale, shift), float32 (C,) each: ``gamma / sqrt(var + eps)``,
        ``beta - mean * scale``.
    """
    scale = gamma / np.sqrt(var + np.float32(eps))
    return scale, beta - mean * scale


def _channel_bias(bias, channels):
    """A conv bias added as a (1, C, 1, 1) or (C, 1, 1) constant, as float32 (C,); None for
    any other shape (it would not be per output channel)."""
    if bias.shape not in {(1, channels, 1, 1), (channels, 1, 1)}:
        return None
    return bias.reshape(channels)


def _bn_params(bn):
    """gamma, beta, mean and var of a ``relax.nn.batch_norm`` call, numpy float32 (C,); gamma
    is 1 without ``scale`` and beta 0 without ``center``, as the operator ignores them then."""
    gamma, beta, mean, var = (arg.value.numpy() for arg in bn.args[1:])
    gamma = gamma if bn.attrs.scale else np.ones_like(gamma)
    beta = beta if bn.attrs.center else np.zeros_like(beta)
    return gamma, beta, mean, var


def _foldable(conv, bn):
    """Whether the BatchNorm normalises the output channels of an OIHW -> NCHW conv2d."""
    return (
        conv.attrs.kernel_layout == "OIHW"
        and conv.attrs.out_layout == "NCHW"
        and bn.attrs.axis % 4 == 1
    )


def fold_conv_batchnorm(mod):
    """Rewrite every conv2d [-> add(constant bias)] -> batch_norm (item 0) with constant
    weights and statistics into ``conv2d(x, W * s) + t``, computed in numpy (see the module
    docstring). Other BatchNorms are left as they are."""
    from tvm import relax
    from tvm.relax.dpl import TupleGetItemPattern, is_const, is_op, rewrite_call, wildcard

    conv = is_op("relax.nn.conv2d")(wildcard(), is_const())
    bias = is_const()
    bn = is_op("relax.nn.batch_norm")(
        conv | is_op("relax.add")(conv, bias), is_const(), is_const(), is_const(), is_const()
    )
    pattern = TupleGetItemPattern(bn, 0)

    def rewriter(expr, m):
        w = m[conv].args[1].value.numpy()
        b = _channel_bias(m[bias].value.numpy(), len(w)) if bias in m else np.float32(0)
        if b is None or not _foldable(m[conv], m[bn]) or not read_once(m[bn].args[0]):
            return expr
        gamma, beta, mean, var = _bn_params(m[bn])
        scale, shift = bn_scale_shift(gamma, beta, mean - b, var, m[bn].attrs.epsilon)
        folded = relax.const(w * scale.reshape(-1, 1, 1, 1))
        out = relax.Call(m[conv].op, [m[conv].args[0], folded], m[conv].attrs)
        return relax.op.add(out, relax.const(shift.reshape(1, -1, 1, 1)))

    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            read_once = _read_once(func)
            mod[gvar] = rewrite_call(pattern, rewriter, func)
    return mod


def _read_once(func):
    """A test of whether a value bound in ``func`` (the conv, or its bias add, that a
    BatchNorm reads) is read by one expression only. Folding the BatchNorm into a conv whose
    output something else reads too would duplicate the conv (case C26: a second branch
    reading the conv's output), with the layer names and per-layer tools lost."""
    from tvm import relax

    from .graph import use_counts

    uses = use_counts(func)
    bound = {value: var for var, value in relax.analysis.get_var2val(func).items()}

    def test(expr):
        var = expr if isinstance(expr, relax.Var) else bound.get(expr)
        return var is None or uses.get(var, 0) == 1

    return test


def fold_batchnorm(mod):
    """Fold constants and every inference BatchNorm that follows a conv2d into its weights;
    decompose any other BatchNorm into elementwise ops.

    The first ``FoldConstant`` makes the operands the rewrite matches constants (the importer
    reshapes conv biases to (1, C, 1, 1) and transposes linear weights); the last folds the
    constant parts of decomposed BatchNorms.
    """
    from tvm import relax

    mod = relax.transform.FoldConstant()(mod)
    mod = fold_conv_batchnorm(mod)
    mod = relax.transform.DecomposeOpsForInference()(mod)
    return relax.transform.FoldConstant()(mod)
