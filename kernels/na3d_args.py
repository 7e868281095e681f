"""Argument checks shared by every 3D neighborhood-attention kernel.

Layout `(B, T, H, W, heads, head_dim)` for q, k and v; the output has q's shape.
"""

from __future__ import annotations

from typing import Sequence, Union

import torch

Triple = tuple[int, int, int]
IntOr3 = Union[int, Sequence[int]]
BoolOr3 = Union[bool, Sequence[bool]]

AXES = ("T", "H", "W")


def _is(x, kind: type) -> bool:
    return isinstance(x, kind) and (kind is bool or not isinstance(x, bool))


def as_triple(value, name: str, kind: type) -> tuple:
    """`value` as a 3-tuple of `kind` (a single value is repeated)."""
    if _is(value, kind):
        return (value,) * 3
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be {kind.__name__} or a sequence of 3, got {value!r}") from None
    if len(items) != 3 or not all(_is(x, kind) for x in items):
        raise TypeError(f"{name} must be {kind.__name__} or a sequence of 3 {kind.__name__}s, got {value!r}")
    return items


def _plain_triple(value, kind: type) -> tuple | None:
    """`value` as a 3-tuple when it is exactly `kind` or a tuple/list of 3 of exactly `kind`; else None."""
    if type(value) is kind:
        return (value,) * 3
    if type(value) in (tuple, list) and len(value) == 3:
        a, b, c = value
        if type(a) is kind and type(b) is kind and type(c) is kind:
            return (a, b, c)
    return None


def check_na3d(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel_size: IntOr3,
               is_causal: BoolOr3 = False, dtypes: Sequence[torch.dtype] | None = None) -> tuple[Triple, tuple[bool, bool, bool]]:
    """Validate q/k/v and the window; returns (kernel triple, causal triple). Raises with what is allowed.

    The decoder makes hundreds of NA calls a decode: a call that plainly passes every check
    (tensors of one shape, dtype and device; plain ints and bools) is accepted in a few
    comparisons; anything else goes through `_check_each`, which names what is wrong.
    """
    kernel = _plain_triple(kernel_size, int)
    causal = _plain_triple(is_causal, bool)
    if (kernel is not None and causal is not None and type(q) is torch.Tensor and type(k) is torch.Tensor
            and type(v) is torch.Tensor):
        shape = q.shape
        if (len(shape) == 6 and k.shape == shape and v.shape == shape and 0 not in shape
                and q.dtype == k.dtype == v.dtype and (dtypes is None or q.dtype in dtypes)
                and q.device == k.device == v.device
                and 1 <= kernel[0] <= shape[1] and 1 <= kernel[1] <= shape[2] and 1 <= kernel[2] <= shape[3]):
            return kernel, causal
    return _check_each(q, k, v, kernel_size, is_causal, dtypes)


def _check_each(q, k, v, kernel_size, is_causal, dtypes) -> tuple[Triple, tuple[bool, bool, bool]]:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 6:
            raise ValueError(f"{name} must have layout (B, T, H, W, heads, head_dim), i.e. 6 dims; "
                             f"got shape {tuple(t.shape)}")
    if q.shape != k.shape or q.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"q, k, v shapes must match: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if v.shape[-1] != q.shape[-1]:
        raise ValueError(f"v's head_dim {v.shape[-1]} must equal q's {q.shape[-1]}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v dtypes must match: {q.dtype}, {k.dtype}, {v.dtype}")
    if dtypes is not None and q.dtype not in dtypes:
        raise TypeError(f"dtype {q.dtype} not supported; expected one of {', '.join(map(str, dtypes))}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device: {q.device}, {k.device}, {v.device}")
    kernel = as_triple(kernel_size, "kernel_size", int)
    causal = as_triple(is_causal, "is_causal", bool)
    for axis, size, length in zip(AXES, kernel, q.shape[1:4]):
        if size < 1:
            raise ValueError(f"kernel_size along {axis} must be >= 1, got {size}")
        if size > length:
            raise ValueError(f"kernel_size {size} along {axis} is larger than the axis ({length}); "
                             f"use a kernel <= {length} or pad the input")
    if min(q.shape) == 0:
        raise ValueError(f"empty input: shape {tuple(q.shape)}")
    return kernel, causal
