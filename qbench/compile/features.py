"""CPU features of a target: what kernel selection and the kernels' tiling ask of it."""

import functools
import json


def has_feature(target, feature):
    """True when ``target`` (a dict or ``tvm.target.Target``) is an llvm CPU with the LLVM
    ``feature`` (e.g. ``avx2``, ``avx512vnni``, ``dotprod``)."""
    import tvm
    from tvm.target import codegen

    if not isinstance(target, tvm.target.Target):
        target = _tvm_target(json.dumps(target, sort_keys=True))
    if target.kind.name != "llvm":
        return False
    return bool(codegen.target_has_features(feature, target))


@functools.lru_cache(maxsize=64)
def _tvm_target(target_json):
    """The ``tvm.target.Target`` of a target dict's JSON (built once: kernel selection asks
    for features layer by layer)."""
    import tvm

    return tvm.target.Target(json.loads(target_json))
