"""``benchmarks/kernel_times.py``'s grouping of kernel names by kind."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from kernel_times import kind_of  # noqa: E402

NAMES = {"amx_conv2d", "amx_conv2d2", "amx_conv2d13", "amx_conv2d_max_pool", "fused_add3"}


@pytest.mark.parametrize(
    "name, kind",
    [
        ("amx_conv2d", "amx_conv2d"),  # its own digit stays
        ("amx_conv2d2", "amx_conv2d"),  # a copy: "2d2" was its own kind before (break-test)
        ("amx_conv2d13", "amx_conv2d"),
        ("amx_conv2d_max_pool", "amx_conv2d_max_pool"),
        ("fused_add3", "fused_add"),
        ("unpack_nchw16c6", "unpack_nchw16c6"),  # no "unpack_nchw16c" seen: left as it is
    ],
)
def test_copies_group_under_their_kernel(name, kind):
    assert kind_of(name, NAMES | {name}) == kind
