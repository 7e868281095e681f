"""cuBLASLt's own fp8 epilogues for the DiT's FeedForward at 24576 tokens, against the runtime's path,
under the power limit (exploration for issue 20; written 2026-12-07, not yet run on a GPU: no device
machine started that session).

The runtime's FF (fp8-scaled-mm, row scales): `_scaled_mm` -> bf16 (24576 x 16384) -> the tanh GELU
and fp8 row quantization pass -> `_scaled_mm` -> bf16 -> the gated residual pass. cuBLASLt can do
both passes in its epilogues: FF1 with GELU_BIAS writing e4m3 itself (per-tensor scales only: its
outer-vector scaling has no fp8 output; the output scale from a bound known before the GEMM), FF2
with per-row x per-channel scales (OUTER_VEC_32F), the gate folded into the weights' channel scales
and the bias, and beta = 1 adding the residual in place. The Triton GEMM that tried this (fifteenth
round) cost more energy a call than cuBLAS and lost; this asks whether cuBLAS's own kernels keep their
energy with the epilogues. Prints rel L2 of each path against fp32, then `bench/power_limit.py`'s
phases (steady ms, J/call) alone and beside the cuDNN fp8 self-attention, and FF1's next algorithms.

    pip install nvmath-python cuda-bindings cuda-core cuda-pathfinder   # cuBLASLt's bindings (not a dependency)
    python bench/cublaslt_ff.py [--seconds 2]
"""
import argparse
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

    def __init__(self, m, n, k, out_dtype, epilogue=lt.Epilogue.DEFAULT, vectors=False, beta=0.0,
                 c_dtype=None, algos=8):
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
        c_dtype = c_dtype or (torch.bfloat16 if out_dtype == torch.float8_e4m3fn else out_dtype)
        self.lc = lt.matrix_layout_create(DT[c_dtype], n, m, n)
        self.ld = lt.matrix_layout_create(DT[out_dtype], n, m, n)
        pref = lt.matmul_preference_create()
        _pref_set(pref, lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES, 32 << 20)
        self.results = np.zeros(algos, dtype=lt.matmul_heuristic_result_dtype)
        count = np.zeros(1, dtype=np.int32)
        lt.matmul_algo_get_heuristic(handle(), self.desc, self.la, self.lb, self.lc, self.ld, pref, algos,
                                     self.results.ctypes.data, count.ctypes.data)
        self.count = int(count[0])
        if not self.count:
            raise RuntimeError("cuBLASLt has no algorithm for this GEMM")
        self.ws_size = int(self.results["workspace_size"][:self.count].max()) + 16
        self.ws = torch.empty(self.ws_size, dtype=torch.uint8, device="cuda")
        self.alpha = np.ones(1, dtype=np.float32)
        self.betav = np.full(1, beta, dtype=np.float32)
        self.algo = 0

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
        cptr = c.data_ptr() if c is not None else out.data_ptr()
        lt.matmul(handle(), self.desc, self.alpha.ctypes.data, w.data_ptr(), self.la, x.data_ptr(), self.lb,
                  self.betav.ctypes.data, cptr, self.lc, out.data_ptr(), self.ld, self.algo_ptr(self.algo),
                  self.ws.data_ptr(), self.ws_size, torch.cuda.current_stream().cuda_stream)
        return out


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def accuracy():
    print("== low-level cuBLASLt (nvmath.bindings) at 4096 tokens ==", flush=True)
    g = torch.Generator(device=dev).manual_seed(1)
    t = 4096
    x = torch.randn(t, D, device=dev, generator=g) * (1 + 0.5 * torch.randn(D, device=dev, generator=g)).abs()
    w1 = torch.randn(H, D, device=dev, generator=g) * 0.02 * (1 + torch.rand(H, 1, device=dev, generator=g))
    w2 = torch.randn(D, H, device=dev, generator=g) * 0.01 * (1 + torch.rand(D, 1, device=dev, generator=g))
    b1, b2 = (torch.randn(n, device=dev, generator=g) * 0.1 for n in (H, D))
    gate = torch.rand(D, device=dev, generator=g) + 0.5
    resid = torch.randn(t, D, device=dev, generator=g).bfloat16()
    pre = x @ w1.t() + b1
    gel = F.gelu(pre, approximate="tanh")
    ref = resid.float() + gate * (gel @ w2.t() + b2)
    sa = (x.abs().amax() / 448).reshape(1)
    xt = (x / sa).to(E4M3)
    s1 = (w1.abs().amax() / 448).reshape(1)
    w1t = (w1 / s1).to(E4M3)
    w2s = w2.abs().amax(1) / 448
    w2q = (w2 / w2s[:, None]).to(E4M3)
    bound = (xt.float() * sa).norm(dim=1).amax() * (w1t.float() * s1).norm(dim=1).amax() + b1.abs().amax()
    dscale = (448 / bound).reshape(1).float()
    h8 = None
    try:
        g1 = Gemm(t, H, D, E4M3, lt.Epilogue.GELU_BIAS)
        amax = torch.zeros(1, device=dev)
        h8 = g1(xt, w1t, sa, s1, bias=b1.bfloat16(), d_scale=dscale, amax=amax)
        torch.cuda.synchronize()
        print(f"FF1 GELU_BIAS fp8 out: {g1.count} algos; vs tanh GELU {rel(h8.float() / dscale, gel):.4e}; "
              f"amax_D {amax.item():.3f} vs GELU amax {gel.abs().amax().item():.3f} (bound {bound.item():.2f})", flush=True)
    except Exception:
        traceback.print_exc()
    if h8 is None:
        return
    inv = torch.full((t,), (1 / dscale).item(), device=dev)
    for label, beta in (("outer vectors, no residual", 0.0), ("outer vectors, gated residual in place", 1.0)):
        try:
            g2 = Gemm(t, D, H, torch.bfloat16, lt.Epilogue.BIAS, vectors=True, beta=beta)
            if beta:
                c = resid.clone()
                y = g2(h8, w2q, inv, (w2s * gate).contiguous(), bias=(b2 * gate).bfloat16(), c=c)
                print(f"FF2 {label}: {g2.count} algos, rel L2 {rel(y, ref):.4e}, in place {y.data_ptr() == c.data_ptr()}")
            else:
                y = g2(h8, w2q, inv, w2s.contiguous(), bias=b2.bfloat16())
                print(f"FF2 {label}: {g2.count} algos, rel L2 {rel(y, gel @ w2.t() + b2):.4e}")
            torch.cuda.synchronize()
        except Exception:
            traceback.print_exc()


def timing(seconds: float):
    session = NvmlSession()
    samples, stop = [], threading.Event()
    threading.Thread(target=P.sample, args=(session, samples, stop), daemon=True).start()
    q, k, v = (torch.randn(1, T, P.HEADS, P.HEAD_DIM, device=dev, dtype=torch.bfloat16) for _ in range(3))
    qk = torch.tensor([8 / 448, 8 / 448], device=dev)
    q8, k8 = (to_e4m3(z, qk[0]) for z in (q, k))
    x8 = torch.randn(T, D, device=dev).to(E4M3)
    h8 = (torch.randn(T, H, device=dev) * 4).to(E4M3)
    w1 = torch.randn(H, D, device=dev).to(E4M3)
    w2 = torch.randn(D, H, device=dev).to(E4M3)
    b1 = torch.randn(H, device=dev, dtype=torch.bfloat16)
    b2 = torch.randn(D, device=dev, dtype=torch.bfloat16)
    xres = torch.randn(T, D, device=dev, dtype=torch.bfloat16)
    gate = torch.rand(D, device=dev, dtype=torch.bfloat16)
    rows, c1, c2 = torch.full((T, 1), 1 / 8, device=dev), torch.full((1, H), 1 / 8, device=dev), torch.full((1, D), 1 / 64, device=dev)
    one8 = torch.full((1,), 1 / 8, device=dev)
    d = torch.full((1,), 448 / 8, device=dev)
    inv = 1 / d
    invrows = torch.full((T,), 1 / 56, device=dev)
    sw2 = torch.full((D,), 1 / 64, device=dev)

    def attention():
        C.sdpa_fp8_rows(q8, k8, v, None, qk)

    def ff_rows():
        h = torch._scaled_mm(x8, w1.t(), rows, c1, bias=b1, out_dtype=torch.bfloat16, use_fast_accum=True)
        hq, hs = quantize_rows(h, E4M3, True)
        return torch._scaled_mm(hq, w2.t(), hs[:, None], c2, bias=b2, out_dtype=torch.bfloat16, use_fast_accum=True)

    def ff_rows_res():
        xres.addcmul_(ff_rows(), gate)

    def ff1_rows():
        h = torch._scaled_mm(x8, w1.t(), rows, c1, bias=b1, out_dtype=torch.bfloat16, use_fast_accum=True)
        quantize_rows(h, E4M3, True)

    g1 = Gemm(T, H, D, E4M3, lt.Epilogue.GELU_BIAS)
    print(f"FF1 algorithms {g1.count}", flush=True)
    try:
        g2 = Gemm(T, D, H, torch.bfloat16, lt.Epilogue.BIAS, vectors=True, beta=1.0)
    except Exception as exc:
        print(f"FF2 outer vectors + residual: {type(exc).__name__}: {exc}", flush=True)
        g2 = None
    g2s = Gemm(T, D, H, torch.bfloat16, lt.Epilogue.BIAS)

    def ff1_lt():
        g1(x8, w1, one8, one8, bias=b1, d_scale=d)

    def ff_lt_res():
        h = g1(x8, w1, one8, one8, bias=b1, d_scale=d)
        if g2 is not None:
            g2(h, w2, invrows, sw2, bias=b2, c=xres)
        else:
            xres.addcmul_(g2s(h, w2, inv, one8, bias=b2), gate)

    def ff_lt():
        h = g1(x8, w1, one8, one8, bias=b1, d_scale=d)
        g2s(h, w2, inv, one8, bias=b2)

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(50):
        g2s(h8, w2, inv, one8, bias=b2)
    print(f"host time of a low-level call: {(time.perf_counter() - t0) / 50 * 1e6:.0f} us", flush=True)
    torch.cuda.synchronize()
    try:
        gr = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            ff_lt_res()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(gr):
            ff_lt_res()
        gr.replay()
        torch.cuda.synchronize()
        print("CUDA graph capture of the fused FF: ok", flush=True)
    except Exception:
        traceback.print_exc()

    phases = [("FF rows (runtime now)", ff_rows), ("FF cuBLASLt GELU fp8 out", ff_lt),
              ("FF rows + gated residual", ff_rows_res), ("FF cuBLASLt + residual", ff_lt_res),
              ("FF1 rows + GELU pass", ff1_rows), ("FF1 cuBLASLt GELU fp8", ff1_lt),
              ("attention + FF rows + res", lambda: (attention(), ff_rows_res())),
              ("attention + FF LT + res", lambda: (attention(), ff_lt_res())),
              ("FF rows + residual again", ff_rows_res), ("attention alone", attention)]
    for name, fn in phases:
        try:
            P.phase(name, fn, seconds, samples, session)
        except Exception as exc:
            print(f"{name}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    for i in range(1, min(4, g1.count)):
        g1.algo = i
        try:
            P.phase(f"FF1 cuBLASLt algo {i}", ff1_lt, 1.5, samples, session)
        except Exception as exc:
            print(f"algo {i}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    stop.set()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("cublaslt_ff: needs a CUDA GPU (torch sees none here)")
    print(torch.__version__, torch.cuda.get_device_name(), "cuBLASLt", lt.get_version(), flush=True)
    for step in (accuracy, lambda: timing(args.seconds)):
        try:
            step()
        except Exception:
            traceback.print_exc()
    return 0


if __name__ == "__main__":
    sys.exit(main())
