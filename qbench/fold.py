"""Graph clean-up before quantization: fold BatchNorm (and a conv bias before it) into conv2d.

TVM's ``FoldBatchnormToConv2D`` matches only conv2d -> batch_norm. PyTorch convs with a bias
import as conv2d -> add(bias) -> batch_norm, which it misses; BatchNorm then survives as
per-channel FP32 arithmetic after the integer conv, and per-tensor weight scales are chosen
on unscaled weights. ``batch_norm(conv + b) == batch_norm'(conv)`` with running mean
``mean - b``, so the bias moves into the BatchNorm first.
"""


def fold_conv_bias_into_batchnorm(mod):
    """Rewrite conv2d -> add(constant b) -> batch_norm as conv2d -> batch_norm(mean - b)."""
    from tvm import relax
    from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard

    conv = is_op("relax.nn.conv2d")(wildcard(), is_const())
    bias = is_const()
    gamma, beta, mean, var = is_const(), is_const(), is_const(), is_const()
    bn = is_op("relax.nn.batch_norm")(is_op("relax.add")(conv, bias), gamma, beta, mean, var)

    def rewriter(expr, m):
        b = m[bias].value.numpy().reshape(-1)
        running_mean = m[mean].value.numpy()
        if b.shape != running_mean.shape:
            return expr
        new_mean = relax.const(running_mean - b.astype(running_mean.dtype))
        return relax.Call(m[bn].op, [m[conv], m[gamma], m[beta], new_mean, m[var]], m[bn].attrs)

    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mod[gvar] = rewrite_call(bn, rewriter, func)
    return mod


def fold_batchnorm(mod):
    """Fold constants and every inference BatchNorm that follows a conv2d into its weights;
    decompose any other BatchNorm into elementwise ops."""
    from tvm import relax

    mod = relax.transform.FoldConstant()(mod)
    mod = fold_conv_bias_into_batchnorm(mod)
    mod = relax.transform.FoldBatchnormToConv2D()(mod)
    mod = relax.transform.DecomposeOpsForInference()(mod)
    return relax.transform.FoldConstant()(mod)
