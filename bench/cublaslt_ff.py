"""cuBLASLt's own fp8 epilogues for the DiT's FeedForward at 24576 tokens, against the runtime's path,
under the power limit (exploration for issue 20).

The runtime's FF (fp8-scaled-mm, row scales): `_scaled_mm` -> bf16 (24576 x 16384) -> the tanh GELU
and fp8 row quantization pass -> `_scaled_mm` -> bf16 -> the gated residual pass. Fused here:
- FF1: GELU_BIAS writing e4m3 itself. cuBLASLt's outer-vector (row x channel) scaling has no fp8
  output, so x and W1 are scaled per tensor; the output scale is a power of two from a bound known
  before the GEMM (|GELU(h)| <= max_j ||w1_j|| * max_i ||x_i|| + max|b1|, with ||x_i|| bounded from the
  AdaLN modulation: sqrt(D) max|1 + scale| + ||shift||).
- FF2: outer vectors (h's rows x W2's channels, the AdaLN gate folded into the channel scales) and
  beta = 1 adding the residual in place. cuBLASLt refuses the BIAS epilogue with outer vectors
  (CUBLAS_STATUS_NOT_SUPPORTED, cuBLASLt 13.1 on the H100), so the bias rides in two extra K columns:
  h's columns 16384-16385 hold c (a power of two) exactly, W2's hold b / (c * channel scale) as an e4m3
  pair (high part, then the rest): the GEMM adds gate * b itself. K = 16512 (128 columns: with 16,
  K = 16400, cuBLASLt's only outer-vector kernel ran 20% slower).

Measured (H100, 700 W, 2026-12-07; bench/RESULTS.md "sixteenth round"): the FF + gated residual 6.003 ->
5.394 ms and 4.37 -> 3.77 J a call, beside the cuDNN fp8 self-attention 17.311 -> 16.618 ms; the error
against fp32 as the runtime's path (5.3667e-02 against 5.3653e-02).

    pip install nvmath-python cuda-bindings cuda-core cuda-pathfinder   # cuBLASLt's bindings (not a dependency)
    python bench/cublaslt_ff.py [--seconds 2]
"""
import argparse
import math
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import power_limit as P  # noqa: E402  (puts the repository first on sys.path)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from backends.machine.nvml import NvmlSession  # noqa: E402
from backends.runtime import cudnn_fp8_attention as C  # noqa: E402
from kernels.int8_gemm import quantize_rows  # noqa: E402
from kernels.scale_cast import to_e4m3  # noqa: E402

try:
    import numpy as np
    from nvmath.bindings import cublas
    from nvmath.bindings import cublasLt as lt
except ImportError as e:  # pragma: no cover - the GPU machine's optional packages
    sys.exit(f"cublaslt_ff: needs nvmath-python's cuBLASLt bindings ({e}); see the docstring")

E4M3 = torch.float8_e4m3fn
T, D, H = P.TOKENS, P.DIM, P.FF
KA = H + 128  # FF2's K with the bias columns (`--extra`: 16 made cuBLASLt's only outer-vector kernel 20% slower)
dev = torch.device("cuda")


DT = {torch.float8_e4m3fn: 28, torch.bfloat16: 14, torch.float32: 0}
ATTR = lt.MatmulDescAttribute
_HANDLE = None


def handle():
    global _HANDLE
    if _HANDLE is None:
        _HANDLE = lt.create()
    return _HANDLE


def _set(desc, attr, value):
    buf = np.array([value], dtype=lt.get_matmul_desc_attribute_dtype(attr))
    lt.matmul_desc_set_attribute(desc, attr, buf.ctypes.data, buf.itemsize)


def _pref_set(pref, attr, value):
    buf = np.array([value], dtype=lt.get_matmul_preference_attribute_dtype(attr))
    lt.matmul_preference_set_attribute(pref, attr, buf.ctypes.data, buf.itemsize)


class Gemm:
    """y = epilogue(scales * x @ w.T + beta * c) through cuBLASLt, x (M, K) and w (N, K) e4m3 row-major,
    y (M, N) row-major: in cuBLASLt's column-major terms y.T = w (A, op T) times x.T (B, op N), so its
    A scale is the weights' and its B scale the activations'. One planned shape a Gemm."""

    def __init__(self, m, n, k, out_dtype, epilogue=lt.Epilogue.DEFAULT, vectors=False, beta=0.0, ldd=None,
                 algos=8):
        self.m, self.n, self.k, self.out_dtype, self.beta = m, n, k, out_dtype, beta
        self.desc = lt.matmul_desc_create(cublas.ComputeType.COMPUTE_32F, 0)
        _set(self.desc, ATTR.TRANSA, 1)
        _set(self.desc, ATTR.TRANSB, 0)
        _set(self.desc, ATTR.FAST_ACCUM, 1)
        _set(self.desc, ATTR.EPILOGUE, int(epilogue))
        self.has_bias = "BIAS" in lt.Epilogue(epilogue).name
        if self.has_bias:
            _set(self.desc, ATTR.BIAS_DATA_TYPE, DT[torch.bfloat16])
        if vectors:
            _set(self.desc, ATTR.A_SCALE_MODE, int(lt.MatmulMatrixScale.OUTER_VEC_32F))
            _set(self.desc, ATTR.B_SCALE_MODE, int(lt.MatmulMatrixScale.OUTER_VEC_32F))
        self.la = lt.matrix_layout_create(DT[torch.float8_e4m3fn], k, n, k)
        self.lb = lt.matrix_layout_create(DT[torch.float8_e4m3fn], k, m, k)
        c_dtype = torch.bfloat16 if out_dtype == torch.float8_e4m3fn else out_dtype  # C is not read at beta 0
        self.lc = lt.matrix_layout_create(DT[c_dtype], n, m, ldd or n)
        self.ld = lt.matrix_layout_create(DT[out_dtype], n, m, ldd or n)  # ldd: D a slice of wider rows
        self.algos, self.results, self.count, self.algo = algos, None, 0, 0
        self.alpha = np.ones(1, dtype=np.float32)
        self.betav = np.full(1, beta, dtype=np.float32)

    def _plan(self):
        """The heuristic's algorithms, asked once every pointer attribute is set (an algorithm planned
        without the D scale or amax pointers is refused when they are set at the call)."""
        pref = lt.matmul_preference_create()
        _pref_set(pref, lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES, 32 << 20)
        self.results = np.zeros(self.algos, dtype=lt.matmul_heuristic_result_dtype)
        count = np.zeros(1, dtype=np.int32)
        lt.matmul_algo_get_heuristic(handle(), self.desc, self.la, self.lb, self.lc, self.ld, pref, self.algos,
                                     self.results.ctypes.data, count.ctypes.data)
        self.count = int(count[0])
        if not self.count:
            raise RuntimeError("cuBLASLt has no algorithm for this GEMM")
        self.ws_size = int(self.results["workspace_size"][:self.count].max()) + 16
        self.ws = torch.empty(self.ws_size, dtype=torch.uint8, device="cuda")

    def algo_ptr(self, i):
        return self.results.ctypes.data + i * self.results.itemsize  # algo is the struct's first field

    def __call__(self, x, w, sx, sw, bias=None, d_scale=None, c=None, out=None, amax=None):
        if out is None:
            out = c if c is not None and self.beta else torch.empty(self.m, self.n, dtype=self.out_dtype, device=x.device)
        _set(self.desc, ATTR.A_SCALE_POINTER, sw.data_ptr())
        _set(self.desc, ATTR.B_SCALE_POINTER, sx.data_ptr())
        if d_scale is not None:
            _set(self.desc, ATTR.D_SCALE_POINTER, d_scale.data_ptr())
        if amax is not None:
            _set(self.desc, ATTR.AMAX_D_POINTER, amax.data_ptr())
        if self.has_bias:
            _set(self.desc, ATTR.BIAS_POINTER, bias.data_ptr())
        if self.results is None:
            self._plan()
        cptr = c.data_ptr() if c is not None else 0  # beta 0: no C (C == D needs one descriptor for both)
        lt.matmul(handle(), self.desc, self.alpha.ctypes.data, w.data_ptr(), self.la, x.data_ptr(), self.lb,
                  self.betav.ctypes.data, cptr, self.lc, out.data_ptr(), self.ld, self.algo_ptr(self.algo),
                  self.ws.data_ptr(), self.ws_size, torch.cuda.current_stream().cuda_stream)
        return out

    def choose(self, call, tries=4, calls=20):
        """Time the heuristic's first `tries` algorithms on `call()` (eager, `calls` each) and keep the fastest."""
        times = []
        for i in range(min(tries, self.count)):
            self.algo = i
            try:
                call()
                torch.cuda.synchronize()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(calls):
                    call()
                e1.record()
                e1.synchronize()
                times.append((e0.elapsed_time(e1) / calls, i))
            except Exception as exc:
                print(f"    algo {i}: {type(exc).__name__}: {str(exc)[:100]}")
        self.algo = min(times)[1]
        return ", ".join(f"{i}: {ms:.3f} ms" for ms, i in sorted(times, key=lambda t: t[1]))


def pow2_floor(t):
    return torch.exp2(torch.floor(torch.log2(t)))


class Fused:
    """The FF and its gated residual in two cuBLASLt calls (the module docstring's form), for `t` tokens."""

    def __init__(self, t, w1, b1, w2, b2):
        self.t = t
        self.s1 = (w1.abs().amax() / 448).reshape(1)
        self.w1q = (w1 / self.s1).to(E4M3)
        self.w1norm = (self.w1q.float() * self.s1).norm(dim=1).amax()  # for the bound
        self.b1 = b1.bfloat16()
        self.b1max = b1.abs().amax()
        self.w2s = (w2.abs().amax(1) / 448).float()
        self.c = float(max(8.0, 2.0 ** math.ceil(math.log2(float((b2.abs() / (448 * self.w2s)).amax()) + 1e-30))))
        v = b2.float() / (self.c * self.w2s)
        hi = v.to(E4M3)
        lo = (v - hi.float()).to(E4M3)
        self.w2aug = torch.zeros(D, KA, device=dev, dtype=E4M3)
        self.w2aug[:, :H] = (w2 / self.w2s[:, None]).to(E4M3)
        if KA > H:
            self.w2aug[:, H], self.w2aug[:, H + 1] = hi, lo
        self.h = torch.zeros(t, KA, device=dev, dtype=E4M3)  # columns H + 2 on stay 0
        self.rows = torch.empty(t, device=dev)
        self.cols = torch.empty(D, device=dev)
        self.g1 = Gemm(t, H, D, E4M3, lt.Epilogue.GELU_BIAS, ldd=KA)
        self.g2 = Gemm(t, D, KA, torch.bfloat16, vectors=True, beta=1.0)

    def __call__(self, x8, sx, xnorm, gate, resid):
        """resid += gate * FF(x): x8 e4m3 (t, D) with the per-tensor scale `sx`, `xnorm` a bound on its rows' norms."""
        bound = torch.clamp(self.w1norm * xnorm + self.b1max, min=self.c)
        self.dscale = dscale = pow2_floor(448 / bound)
        if KA > H:
            self.h[:, H:H + 2] = (self.c * dscale).to(E4M3)  # c exactly (powers of two)
        self.g1(x8, self.w1q, sx, self.s1, bias=self.b1, d_scale=dscale, out=self.h)
        self.rows.copy_((1 / dscale).expand(self.t))
        torch.mul(self.w2s, gate, out=self.cols)
        return self.g2(self.h, self.w2aug, self.rows, self.cols, c=resid)


def runtime_ff(x, w1q, w1s, b1, w2q, w2s, b2):
    """The runtime's path: x quantized per row, the weights per channel, GELU in the row pass."""
    xq, xs = quantize_rows(x, E4M3)
    h = torch._scaled_mm(xq, w1q.t(), xs[:, None], w1s[None, :], bias=b1, out_dtype=torch.bfloat16,
                         use_fast_accum=True)
    hq, hs = quantize_rows(h, E4M3, True)
    return torch._scaled_mm(hq, w2q.t(), hs[:, None], w2s[None, :], bias=b2, out_dtype=torch.bfloat16,
                            use_fast_accum=True)


def adaln_input(t, g):
    """x as the FF sees it: RMS-normalized rows times (1 + scale) plus shift; the bound on its rows' norms."""
    xn = torch.randn(t, D, device=dev, generator=g)
    xn = xn / xn.pow(2).mean(1, keepdim=True).sqrt()
    scale, shift = 0.3 * torch.randn(D, device=dev, generator=g), 0.2 * torch.randn(D, device=dev, generator=g)
    x = xn * (1 + scale) + shift
    xnorm = math.sqrt(D) * (1 + scale).abs().amax() + shift.norm()
    sx = torch.exp2(torch.ceil(torch.log2((math.sqrt(D) * (1 + scale).abs().amax() + shift.abs().amax()) / 448)))
    return x, xnorm.reshape(1), sx.reshape(1)


def weights(g):
    w1 = torch.randn(H, D, device=dev, generator=g) * 0.02 * (1 + torch.rand(H, 1, device=dev, generator=g))
    w2 = torch.randn(D, H, device=dev, generator=g) * 0.01 * (1 + torch.rand(D, 1, device=dev, generator=g))
    b1, b2 = (torch.randn(n, device=dev, generator=g) * 0.1 for n in (H, D))
    return w1, b1, w2, b2


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def accuracy():
    print("== error against fp32, 4096 tokens (AdaLN-like x; the FF's gated output alone, then with a residual) ==")
    g = torch.Generator(device=dev).manual_seed(1)
    t = 4096
    w1, b1, w2, b2 = weights(g)
    x, xnorm, sx = adaln_input(t, g)
    gate = torch.rand(D, device=dev, generator=g) + 0.5
    gel = F.gelu(x @ w1.t() + b1, approximate="tanh")
    ref = gate * (gel @ w2.t() + b2)
    w1s, w2s = w1.abs().amax(1) / 448, w2.abs().amax(1) / 448
    ours = runtime_ff(x.bfloat16(), (w1 / w1s[:, None]).to(E4M3), w1s, b1.bfloat16(), (w2 / w2s[:, None]).to(E4M3),
                      w2s, b2.bfloat16()).float() * gate
    print(f"runtime path (rows, per channel):      rel L2 {rel(ours, ref):.4e}")
    fused = Fused(t, w1, b1, w2, b2)
    x8 = (x / sx).to(E4M3)
    out = fused(x8, sx, xnorm, gate, torch.zeros(t, D, device=dev, dtype=torch.bfloat16))
    torch.cuda.synchronize()
    zero = fused(torch.zeros_like(x8), sx, xnorm, gate, torch.zeros(t, D, device=dev, dtype=torch.bfloat16))
    ref0 = gate * (F.gelu(b1, approximate="tanh") @ w2.t() + b2)  # x = 0: the bias terms alone
    print(f"fused (per tensor, bias columns c={fused.c:g}): rel L2 {rel(out, ref):.4e}; at x = 0 {rel(zero[0], ref0):.2e}")
    resid = torch.randn(t, D, device=dev, generator=g).bfloat16()
    total = fused(x8, sx, xnorm, gate, resid.clone())
    print(f"with a residual in place: rel L2 {rel(total, resid.float() + ref):.4e} "
          f"(bf16 of the sum alone {rel((resid.float() + ref).bfloat16(), resid.float() + ref):.4e})")
    gmax = gel.abs().amax().item()
    bound = (fused.w1norm * xnorm + fused.b1max).item()
    print(f"FF1 output bound {bound:.1f} against its amax {gmax:.2f}; x scale {sx.item():.3g} "
          f"(x amax {x.abs().amax().item():.2f})", flush=True)


def timing(seconds: float, quick: bool):
    session = NvmlSession()
    samples, stop = [], threading.Event()
    threading.Thread(target=P.sample, args=(session, samples, stop), daemon=True).start()
    g = torch.Generator(device=dev).manual_seed(2)
    q, k, v = (torch.randn(1, T, P.HEADS, P.HEAD_DIM, device=dev, dtype=torch.bfloat16) for _ in range(3))
    qk = torch.tensor([8 / 448, 8 / 448], device=dev)
    q8, k8 = (to_e4m3(z, qk[0]) for z in (q, k))
    w1, b1, w2, b2 = weights(g)
    x, xnorm, sx = adaln_input(T, g)
    xb, x8 = x.bfloat16(), (x / sx).to(E4M3)
    gate = (torch.rand(D, device=dev, generator=g) + 0.5).bfloat16()
    w1s, w2s = w1.abs().amax(1) / 448, w2.abs().amax(1) / 448
    w1q, w2q = (w1 / w1s[:, None]).to(E4M3), (w2 / w2s[:, None]).to(E4M3)
    b1b, b2b = b1.bfloat16(), b2.bfloat16()
    xres = torch.randn(T, D, device=dev, dtype=torch.bfloat16)
    fused = Fused(T, w1, b1, w2, b2)
    gatef = gate.float()
    del x

    def attention():
        C.sdpa_fp8_rows(q8, k8, v, None, qk)

    def ours():
        xres.addcmul_(runtime_ff(xb, w1q, w1s, b1b, w2q, w2s, b2b), gate)

    def fused_ff():
        fused(x8, sx, xnorm, gatef, xres)

    def fused_ff1():
        fused.g1(x8, fused.w1q, sx, fused.s1, bias=fused.b1, d_scale=fused.dscale, out=fused.h)

    fused_ff()
    print(f"FF1 algorithms ({fused.g1.count}): {fused.g1.choose(fused_ff1)}; chose {fused.g1.algo}")
    print(f"FF2 algorithms ({fused.g2.count}): {fused.g2.choose(lambda: fused.g2(fused.h, fused.w2aug, fused.rows, fused.cols, c=xres))}; "
          f"chose {fused.g2.algo}", flush=True)
    xres.normal_()
    phases = [("FF + residual, runtime now", ours), ("FF + residual, cuBLASLt fused", fused_ff),
              ("FF2 alone, cuBLASLt", lambda: fused.g2(fused.h, fused.w2aug, fused.rows, fused.cols, c=xres))]
    if not quick:
        phases += [("attention + FF runtime", lambda: (attention(), ours())),
                   ("attention + FF cuBLASLt", lambda: (attention(), fused_ff())),
                   ("FF + residual, runtime again", ours), ("FF + residual, cuBLASLt again", fused_ff),
                   ("attention alone", attention)]
    for name, fn in phases:
        try:
            P.phase(name, fn, seconds, samples, session)
        except Exception as exc:
            print(f"{name}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        xres.normal_()  # the residual grows with every call otherwise
    stop.set()


def main() -> int:
    global KA
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--extra", type=int, default=KA - H,
                        help="FF2's K columns past 16384 (0: no bias columns, the bias left out: a bound)")
    parser.add_argument("--quick", action="store_true", help="the FF phases only, no accuracy")
    args = parser.parse_args()
    KA = H + args.extra
    print(f"FF2's K {KA}", flush=True)
    if not torch.cuda.is_available():
        sys.exit("cublaslt_ff: needs a CUDA GPU (torch sees none here)")
    print(torch.__version__, torch.cuda.get_device_name(), "cuBLASLt", lt.get_version(), flush=True)
    for step in ((() if args.quick else (accuracy,)) + (lambda: timing(args.seconds, args.quick),)):
        try:
            step()
        except Exception:
            traceback.print_exc()
    return 0


if __name__ == "__main__":
    sys.exit(main())
