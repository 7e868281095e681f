"""LTX-2's FeedForward (Linear, tanh GELU, Linear) and its gated residual in two cuBLASLt fp8 calls.

- FF1: cuBLASLt's GELU_BIAS epilogue writes e4m3 itself. Its fp8 output takes one scale a tensor,
  so x and W1 are scaled per tensor; the output scale is a power of two from a bound known before the
  GEMM: |GELU(h)| <= |h| <= max_j ||w1_j|| * max_i ||x_i|| + max|b1| (Cauchy-Schwarz), with the rows'
  norms bounded by the AdaLN that wrote x (`kernels.adaln.bound_scale`).
- FF2: outer-vector scaling (h's rows x W2's channels, an AdaLN gate folded into the channel scales)
  and beta = 1 adding the residual. cuBLASLt refuses its BIAS epilogue with outer vectors
  (CUBLAS_STATUS_NOT_SUPPORTED, cuBLASLt 13.1 on the H100), so the bias rides in two extra K columns:
  h's hold c (a power of two) exactly, W2's hold b2 / (c * channel scale) as an e4m3 pair (high part,
  then the rest). K grows by `EXTRA` = 128 so that it stays a multiple of 128 (16 columns made
  cuBLASLt's one outer-vector kernel 20% slower).

Measured (H100, 700 W, bench/RESULTS.md "sixteenth round"): FF + gated residual 6.003 -> 5.394 ms and
4.37 -> 3.77 J a call at 24576 tokens, the error against fp32 as the row-scaled path's.

`feed_forward` runs cuBLASLt through nvmath-python's bindings on a Hopper GPU (`available()` says
whether it can), and elsewhere the same arithmetic in torch (fp32 products of the e4m3 operands).
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import torch
import torch.nn.functional as F

from kernels.int8_gemm import FP8_MAX

E4M3 = torch.float8_e4m3fn
EXTRA = 128  # FF2's K columns past the hidden width; the bias uses two
C = 8.0  # the bias columns' value in h: a power of two (c * FF1's output scale stays exact in e4m3 down to
# 2**-9, i.e. for FF1 output bounds up to c * FP8_MAX * 2**9 ~ 1.8e6)
X_ROUNDING = 1 + 2**-4  # e4m3 rounds x's rows up by at most this: FF1's bound covers the rows it multiplies


class FFWeights(NamedTuple):
    """One FeedForward's operands: W1 (H, D) e4m3 by one scale, its rows' largest norm, b1 in the
    activations' dtype and its amax; W2 with the bias columns (D, H + EXTRA) e4m3, its channel scales,
    and c (all tensors, so that blocks with other values share one compiled graph)."""

    w1: torch.Tensor
    s1: torch.Tensor
    w1norm: torch.Tensor
    b1: torch.Tensor
    b1max: torch.Tensor
    w2: torch.Tensor
    w2s: torch.Tensor
    c: torch.Tensor


def prepare(w1: torch.Tensor, b1: torch.Tensor | None, w2: torch.Tensor, b2: torch.Tensor | None,
            dtype: torch.dtype) -> FFWeights:
    """`FFWeights` of the float weights W1 (H, D), b1 (H,), W2 (D, H), b2 (D,) (biases may be None)."""
    w1, w2 = w1.detach().float(), w2.detach().float()
    (h, d), dev = w1.shape, w1.device
    if w2.shape != (d, h):
        raise ValueError(f"W2 must be ({d}, {h}) for W1 {tuple(w1.shape)}, got {tuple(w2.shape)}")
    b1 = torch.zeros(h, device=dev) if b1 is None else b1.detach().float()
    b2 = torch.zeros(d, device=dev) if b2 is None else b2.detach().float()
    s1 = (w1.abs().amax().clamp(min=1e-12) / FP8_MAX).reshape(1)
    w1q = (w1 / s1).to(E4M3)
    # a channel's scale also covers its bias part, b2 / (c * scale) <= FP8_MAX: a channel of zero weights
    # and some bias keeps a sane scale (a floor of 1e-12 would have made c, and FF1's bound, huge)
    w2s = torch.maximum(w2.abs().amax(dim=1), b2.abs() / C).clamp(min=1e-12) / FP8_MAX
    c = C
    v = b2 / (c * w2s)
    hi = v.to(E4M3)
    w2aug = torch.zeros(d, h + EXTRA, device=dev, dtype=E4M3)
    w2aug[:, :h] = (w2 / w2s[:, None]).to(E4M3)
    w2aug[:, h], w2aug[:, h + 1] = hi, (v - hi.float()).to(E4M3)
    if dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"the activations' dtype must be bfloat16, float16 (cuBLASLt) or float32 (torch), got {dtype}")
    return FFWeights(w1q, s1, (w1q.float() * s1).norm(dim=1).amax().reshape(1), b1.to(dtype),
                     b1.abs().amax().reshape(1), w2aug, w2s, torch.tensor([c], device=dev))


def _lt():
    from nvmath.bindings import cublas, cublasLt
    return cublas, cublasLt


def available(device: torch.device | None = None) -> str | None:
    """Why `feed_forward` cannot run cuBLASLt on `device` (None: it can): Hopper (SM 9.x) and nvmath-python."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    device = None if device is None else torch.device(device)
    index = torch.cuda.current_device() if device is None or device.index is None else device.index
    if index not in _WHY:
        _WHY[index] = _why(index)
    return _WHY[index]


_WHY: dict[int, str | None] = {}


def _why(index: int) -> str | None:
    major, minor = torch.cuda.get_device_capability(index)
    if major != 9:
        return f"cuBLASLt's fp8 outer-vector scaling is used on Hopper (SM 9.x) only; this GPU is SM {major}.{minor}"
    try:
        _lt()
    except ImportError as e:
        return f"nvmath-python's cuBLASLt bindings are not importable ({e}; pip install nvmath-python)"
    return None


_DT = {torch.float8_e4m3fn: 28, torch.bfloat16: 14, torch.float16: 2, torch.float32: 0}  # cudaDataType


class _Gemm:
    """y (M, N) = epilogue(scales * x @ w.T) [+ C] through cuBLASLt, x (M, K) and w (N, K) e4m3
    row-major. In cuBLASLt's column-major terms y.T = w (A, op T) times x.T (B, op N): its A scale is
    the weights', its B scale the activations'. One planned shape a `_Gemm`."""

    def __init__(self, device: int, m: int, n: int, k: int, out: torch.dtype, gelu_bias: bool, vectors: bool,
                 beta: bool, ldd: int, c_dtype: torch.dtype) -> None:
        import numpy as np

        self.device = torch.device("cuda", device)
        self.what = (f"{m} x {k} -> {n}, out {out}, C {c_dtype}, {'GELU_BIAS' if gelu_bias else 'DEFAULT'}"
                     f"{', outer vectors' if vectors else ''}, on cuda:{device}")

        cublas, lt = _lt()
        self.np, self.lt = np, lt
        attr = lt.MatmulDescAttribute
        self.desc = lt.matmul_desc_create(cublas.ComputeType.COMPUTE_32F, 0)
        for a, v in ((attr.TRANSA, 1), (attr.TRANSB, 0), (attr.FAST_ACCUM, 1),
                     (attr.EPILOGUE, int(lt.Epilogue.GELU_BIAS if gelu_bias else lt.Epilogue.DEFAULT))):
            self._set(a, v)
        if gelu_bias:
            self._set(attr.BIAS_DATA_TYPE, _DT[c_dtype])
        if vectors:
            self._set(attr.A_SCALE_MODE, int(lt.MatmulMatrixScale.OUTER_VEC_32F))
            self._set(attr.B_SCALE_MODE, int(lt.MatmulMatrixScale.OUTER_VEC_32F))
        self.la = lt.matrix_layout_create(_DT[E4M3], k, n, k)
        self.lb = lt.matrix_layout_create(_DT[E4M3], k, m, k)
        self.lc = lt.matrix_layout_create(_DT[c_dtype], n, m, ldd)
        self.ld = lt.matrix_layout_create(_DT[out], n, m, ldd)
        self.alpha = np.ones(1, dtype=np.float32)
        self.beta = np.full(1, 1.0 if beta else 0.0, dtype=np.float32)
        self.algo = None

    def _set(self, attr, value) -> None:
        lt, np = self.lt, self.np
        buf = np.array([value], dtype=lt.get_matmul_desc_attribute_dtype(attr))
        lt.matmul_desc_set_attribute(self.desc, attr, buf.ctypes.data, buf.itemsize)

    def _plan(self) -> None:
        """The heuristic's first algorithm, asked once every pointer attribute is set (one planned
        without the D scale pointer is refused when it is set at the call)."""
        lt, np = self.lt, self.np
        pref = lt.matmul_preference_create()
        size = np.array([32 << 20], dtype=lt.get_matmul_preference_attribute_dtype(
            lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES))
        lt.matmul_preference_set_attribute(pref, lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES,
                                           size.ctypes.data, size.itemsize)
        self.results = np.zeros(1, dtype=lt.matmul_heuristic_result_dtype)
        count = np.zeros(1, dtype=np.int32)
        lt.matmul_algo_get_heuristic(_handle(self.device.index), self.desc, self.la, self.lb, self.lc, self.ld, pref, 1,
                                     self.results.ctypes.data, count.ctypes.data)
        lt.matmul_preference_destroy(pref)
        if not count[0]:
            raise RuntimeError(f"cuBLASLt has no algorithm for this fp8 GEMM ({self.what})")
        self.ws_size = int(self.results["workspace_size"][0]) + 16
        self.ws = torch.empty(self.ws_size, dtype=torch.uint8, device=self.device)
        self.algo = self.results.ctypes.data  # the algorithm is the result's first field

    def __call__(self, x, w, sx, sw, out, bias=None, d_scale=None, c=None) -> torch.Tensor:
        attr = self.lt.MatmulDescAttribute
        self._set(attr.A_SCALE_POINTER, sw.data_ptr())
        self._set(attr.B_SCALE_POINTER, sx.data_ptr())
        if d_scale is not None:
            self._set(attr.D_SCALE_POINTER, d_scale.data_ptr())
        if bias is not None:
            self._set(attr.BIAS_POINTER, bias.data_ptr())
        if self.algo is None:
            if torch.cuda.is_current_stream_capturing():
                raise RuntimeError(f"cuBLASLt's first call of a shape plans and allocates, which a CUDA graph "
                                   f"capture cannot hold ({self.what}): call it once before capturing")
            self._plan()
        self.lt.matmul(_handle(self.device.index), self.desc, self.alpha.ctypes.data, w.data_ptr(), self.la,
                       x.data_ptr(), self.lb, self.beta.ctypes.data, 0 if c is None else c.data_ptr(), self.lc,
                       out.data_ptr(), self.ld, self.algo, self.ws.data_ptr(), self.ws_size,
                       torch.cuda.current_stream(self.device).cuda_stream)
        return out


_HANDLES: dict[int, int] = {}
_GEMMS: dict[tuple, _Gemm] = {}
_LOCK = threading.Lock()  # a call sets its pointers on a descriptor its shape's calls share


def _handle(device: int):
    if device not in _HANDLES:
        with torch.cuda.device(device):
            _HANDLES[device] = _lt()[1].create()
    return _HANDLES[device]


def _gemm(*key) -> _Gemm:
    """The planned GEMM of (device index, shape, ...), made once."""
    if key not in _GEMMS:
        _GEMMS[key] = _Gemm(*key)
    return _GEMMS[key]


def check(q: torch.Tensor, xs: torch.Tensor, xnorm: torch.Tensor, w: FFWeights,
          resid: torch.Tensor | None, gate: torch.Tensor | None) -> None:
    """Raise ValueError where the arguments are not what `feed_forward` takes, saying what they need."""
    t, d = q.shape
    hidden = w.w1.shape[0]
    if q.dtype != E4M3 or not q.is_contiguous() or w.w1.shape[1] != d:
        raise ValueError(f"feed_forward: x must be contiguous (tokens, {w.w1.shape[1]}) float8_e4m3fn rows, "
                         f"got {tuple(q.shape)} {q.dtype}")
    if xs.dtype != torch.float32 or xs.numel() < 1 or xnorm.shape != (1,):
        raise ValueError("feed_forward: x's scale must be float32 (its first value scales every row) and its "
                         f"rows' norm bound one value, got {tuple(xs.shape)} {xs.dtype}, {tuple(xnorm.shape)}")
    if hidden % 16 or d % 16 or w.w2.shape != (d, hidden + EXTRA):
        raise ValueError(f"feed_forward: widths must be multiples of 16 and W2 ({d}, {hidden + EXTRA}), got "
                         f"{d} -> {hidden}, W2 {tuple(w.w2.shape)}")
    if resid is not None and (resid.numel() != t * d or resid.shape[-1] != d or not resid.is_contiguous()
                              or resid.dtype != w.b1.dtype):
        raise ValueError(f"feed_forward: the residual must be contiguous, {t} rows of {d} in {w.b1.dtype}, got "
                         f"{tuple(resid.shape)} {resid.dtype}")
    if gate is not None and not one_row(gate, d):
        raise ValueError(f"feed_forward: the gate must be one row of {d} values ((..., 1, {d})), got "
                         f"{tuple(gate.shape)}")


def one_row(gate: torch.Tensor | tuple, d: int) -> bool:
    """Whether a gate (or its shape) is one row of d channels: last dimension d, every other 1."""
    shape = tuple(gate.shape) if isinstance(gate, torch.Tensor) else tuple(gate)
    return len(shape) >= 1 and shape[-1] == d and all(n == 1 for n in shape[:-1])


def feed_forward(q: torch.Tensor, xs: torch.Tensor, xnorm: torch.Tensor, w: FFWeights,
                 resid: torch.Tensor | None = None, gate: torch.Tensor | None = None) -> torch.Tensor:
    """[resid +] [gate *] (GELU_tanh(x @ W1.T + b1) @ W2.T + b2) for x = q * xs[0] (q (T, D) e4m3,
    every row by the scale xs[0]; `xnorm` (1,) a bound on x's rows' L2 norms). The result has the
    residual's shape ((T, D) without one), in b1's dtype. cuBLASLt where `available()`, else torch."""
    check(q, xs, xnorm, w, resid, gate)
    t, d = q.shape
    hidden = w.w1.shape[0]
    bound = torch.maximum(w.w1norm * xnorm * X_ROUNDING + w.b1max, w.c)
    dscale = torch.exp2(torch.floor(torch.log2(FP8_MAX / bound)))  # |GELU(h)| * dscale <= FP8_MAX
    h = torch.empty((t, hidden + EXTRA), dtype=E4M3, device=q.device)
    tail = torch.zeros(EXTRA, device=q.device)
    tail[:2] = w.c * dscale  # exactly c once scaled back: both powers of two
    h[:, hidden:] = tail.to(E4M3)
    rows = (1 / dscale).expand(t).contiguous()
    cols = w.w2s if gate is None else w.w2s * gate.reshape(d).float()
    out_shape = (t, d) if resid is None else resid.shape
    if q.is_cuda and available(q.device) is None:
        if w.b1.dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"feed_forward: cuBLASLt's path takes bfloat16 or float16 activations, got {w.b1.dtype}")
        dev = q.device.index if q.device.index is not None else torch.cuda.current_device()
        out = torch.empty(out_shape, dtype=w.b1.dtype, device=q.device)
        g1 = _gemm(dev, t, hidden, d, E4M3, True, False, False, hidden + EXTRA, w.b1.dtype)
        g2 = _gemm(dev, t, d, hidden + EXTRA, w.b1.dtype, False, True, resid is not None, d, w.b1.dtype)
        with _LOCK:
            g1(q, w.w1, xs, w.s1, h, bias=w.b1, d_scale=dscale)
            return g2(h, w.w2, rows, cols, out, c=resid)
    x = q.float() * xs.reshape(-1)[0]
    pre = x @ (w.w1.float() * w.s1).t() + w.b1.float()
    h[:, :hidden] = (F.gelu(pre, approximate="tanh") * dscale).clamp(-FP8_MAX, FP8_MAX).to(E4M3)  # within the bound; else 448, not e4m3's NaN
    y = (h.float() @ w.w2.float().t()) * rows[:, None] * cols[None, :]
    if resid is not None:
        y = y + resid.reshape(t, d).float()
    return y.to(w.b1.dtype).reshape(out_shape)
