"""FP8 attention for the DiT on cuDNN's fused fp8 SDPA (the `cudnn` frontend, nvidia-cudnn-frontend).

`sdpa_fp8(q, k, v, scale)` takes bf16/fp16 (B, S, heads, head_dim) tensors, quantizes q, k and v
to float8_e4m3fn with one scale per tensor (amax / 448: one max reduction over the three and one
cast launch, which also writes cuDNN's scalars, `kernels.fp8_qkv`), runs cuDNN's fp8 flash
attention (softmax probabilities
requantized to e4m3 at x256 for the P @ V product, fp32 softmax) and returns the output in q's
dtype and layout (`kernels.scale_cast`). On Hopper cuDNN writes O in e4m3 only: O is a convex
combination of v's rows, so O's scale is v's scale x 2 (headroom for the rounding of P) and nothing
saturates. Five launches a call (a memset, the two quantization kernels, cuDNN's, the output's
cast), and no host sync. `sdpa_fp8_rows` leaves O in e4m3 with its descale once per row, the
form an fp8-scaled-mm linear takes (so `to_out` reads O without a dequantization and a new row
quantization between them: `runtime.shared_rows`), and takes q and k already in e4m3 where the
caller knows a static scale for them (`runtime.dense_attention`: LTX-2's q/k RMSNorm bounds
them), which leaves only v to reduce. Graphs are
built once per (shape, strides, device) and cached, with one cuDNN handle per device, made on that
device (its stream set and the graph run under a lock). `sdpa_fp8_rows` is one torch custom op
(`ltx_tui::sdpa_fp8_rows`), so torch.compile keeps a block that calls it in one graph (called
eagerly it runs directly: the op's dispatch would cost more host time).

`supports(q, k, v)` says why a call cannot run (None: it can): 4-dim q, k, v with the same batch
and heads, k and v the same shape, bf16/fp16 (q and k e4m3 with `qk_fp8`), head_dim a multiple of
16 up to 128, CUDA SM 9.0 (cuDNN's Hopper fp8 engine), `import cudnn`, cuDNN >= 9.1.
"""

from __future__ import annotations

import functools
import threading

import torch

from kernels import fp8_qkv
from kernels.scale_cast import scale_cast

P_SCALE = 256.0  # softmax probabilities in [0, 1] -> [0, 256]: a power of two, inside e4m3's range
O_HEADROOM = 2.0
# the slots of kernels.fp8_qkv's scalars, in the order of _Graph.scalars (dq, dk, dv, ds, ss, so)
SLOTS = (fp8_qkv.Q, fp8_qkv.K, fp8_qkv.V, fp8_qkv.DESCALE_S, fp8_qkv.SCALE_S, fp8_qkv.SCALE_O)


@functools.cache
def _cudnn():
    import cudnn

    return cudnn


@functools.cache
def unavailable_reason() -> str | None:
    """Why the cuDNN frontend cannot be used in this process (None: it can)."""
    try:
        version = _cudnn().backend_version()
    except (ImportError, OSError, RuntimeError) as exc:
        return f"the cuDNN frontend (pip install nvidia-cudnn-frontend) is not importable: {exc}"
    if version < 90100:
        return f"cuDNN {version} is older than 9.1 (its fp8 SDPA)"
    return None


def supports(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qk_fp8: bool = False, v_fp8: bool = False) -> str | None:
    """Why these (B, S, heads, head_dim) tensors cannot take the fp8 path (None: they can); `qk_fp8`:
    q and k come in float8_e4m3fn (v as the bf16/fp16 they stand for); `v_fp8`: v comes in e4m3."""
    return tensors_reason(q, k, v, qk_fp8, v_fp8) or _device_reason(q.device)


def tensors_reason(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qk_fp8: bool = False,
                   v_fp8: bool = False) -> str | None:
    """`supports` without the device: shapes and dtypes only (torch.compile traces it)."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return f"q, k, v must be (B, S, heads, head_dim) (got {q.dim()}, {k.dim()}, {v.dim()} dims)"
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        return (f"k and v must share a shape and q their batch and heads (got {tuple(q.shape)}, "
                f"{tuple(k.shape)}, {tuple(v.shape)})")
    e4m3, half = torch.float8_e4m3fn, (torch.bfloat16, torch.float16)  # e4m3 tensors come with their scales
    qk = e4m3 if qk_fp8 else q.dtype if v_fp8 else v.dtype
    if v.dtype not in ((e4m3,) if v_fp8 else half) or q.dtype != qk or k.dtype != qk or (not qk_fp8 and qk not in half):
        want = (f"q and k {'float8_e4m3fn' if qk_fp8 else 'one of bf16/fp16'}, v "
                f"{'float8_e4m3fn' if v_fp8 else 'bf16/fp16' if qk_fp8 else 'their dtype'}")
        return f"q, k, v must be: {want} (got {q.dtype}, {k.dtype}, {v.dtype})"
    d = q.shape[-1]
    if d % 16 or d > 128 or k.shape[-1] != d or v.shape[-1] != d:
        return f"head_dim must be a multiple of 16 up to 128 and the same for q, k, v (got {d})"
    return None


@functools.cache
def _device_reason(device: torch.device) -> str | None:
    if device.type != "cuda":
        return "fp8 SDPA needs CUDA tensors"
    sm = torch.cuda.get_device_capability(device)
    if sm != (9, 0):
        return f"cuDNN's fp8 SDPA runs on SM 9.0 (its Hopper engine), not SM {sm[0]}.{sm[1]}"
    return unavailable_reason()


_HANDLES: dict[torch.device, object] = {}
_LOCK = threading.Lock()  # a handle's stream is set, then the graph runs: one thread at a time


def _handle(device: torch.device):
    """The cuDNN handle for `device`, made with `device` current."""
    h = _HANDLES.get(device)
    if h is None:
        with torch.cuda.device(device):
            h = _HANDLES[device] = _cudnn().create_handle()
    return h


class _Graph:
    """One built cuDNN fp8 SDPA graph and its workspace."""

    def __init__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> None:
        cudnn = _cudnn()
        e4m3, fp32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
        g = cudnn.pygraph(io_data_type=e4m3, intermediate_data_type=fp32, compute_data_type=fp32,
                          handle=_handle(q.device))

        def bhsd(t: torch.Tensor, name: str):  # (B, S, H, D) memory seen as (B, H, S, D)
            b, s, h, d = t.shape
            return g.tensor(name=name, dim=[b, h, s, d], stride=[t.stride(0), t.stride(2), t.stride(1), t.stride(3)],
                            data_type=e4m3)

        self.q, self.k, self.v = bhsd(q, "q"), bhsd(k, "k"), bhsd(v, "v")
        one = dict(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=fp32)
        self.scalars = [g.tensor(name=n, **one) for n in ("dq", "dk", "dv", "ds", "ss", "so")]
        dq, dk, dv, ds, ss, so = self.scalars
        o, _, amax_s, amax_o = g.sdpa_fp8(q=self.q, k=self.k, v=self.v, descale_q=dq, descale_k=dk, descale_v=dv,
                                          descale_s=ds, scale_s=ss, scale_o=so, generate_stats=False,
                                          attn_scale=scale, use_causal_mask=False, name="ltx_tui_sdpa_fp8")
        b, s, h, d = q.shape
        self.out_shape = (b, s, h, d)
        o.set_output(True).set_dim([b, h, s, d]).set_stride([s * h * d, d, h * d, 1]).set_data_type(e4m3)
        for t in (amax_s, amax_o):
            t.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(fp32)
        self.o, self.amax_s, self.amax_o = o, amax_s, amax_o
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        self.graph = g
        self.workspace_size = g.get_workspace_size()

    def run(self, q8, k8, v8, scalars, device) -> torch.Tensor:
        handle = _handle(device)
        out = torch.empty(self.out_shape, dtype=torch.float8_e4m3fn, device=device)
        amax = torch.empty(2, 1, 1, 1, dtype=torch.float32, device=device)  # outputs cuDNN requires; unread
        workspace = torch.empty(self.workspace_size, dtype=torch.uint8, device=device)
        pack = {self.q: q8, self.k: k8, self.v: v8, self.o: out, self.amax_s: amax[0:1], self.amax_o: amax[1:2]}
        pack.update({t: fp8_qkv.scalar(scalars, slot) for t, slot in zip(self.scalars, SLOTS)})
        with _LOCK:
            _cudnn().set_stream(handle=handle, stream=torch.cuda.current_stream(device).cuda_stream)
            self.graph.execute(pack, workspace, handle=handle)
        return out


_GRAPHS: dict[tuple, _Graph] = {}


def _graph(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> _Graph:
    key = (q.device, tuple(q.shape), q.stride(), tuple(k.shape), k.stride(), scale)
    g = _GRAPHS.get(key)
    if g is None:
        g = _GRAPHS[key] = _Graph(q, k, v, scale)
    return g


def sdpa_fp8_quantized(q8, k8, v8, scalars: torch.Tensor, scale: float) -> torch.Tensor:
    """cuDNN's fp8 SDPA on e4m3 (B, S, heads, head_dim) tensors and `kernels.fp8_qkv`'s scalars;
    returns O in e4m3, contiguous (B, S, heads, head_dim) (its descale: scalar DESCALE_O)."""
    if any(t.dtype != torch.float8_e4m3fn for t in (q8, k8, v8)):
        raise ValueError(f"q, k, v must be float8_e4m3fn (got {q8.dtype}, {k8.dtype}, {v8.dtype})")
    if scalars.dtype != torch.float32 or scalars.numel() != fp8_qkv.SIZE:
        raise ValueError(f"scalars must be kernels.fp8_qkv.quantize_qkv's ({fp8_qkv.SIZE} fp32)")
    if k8.stride() != v8.stride() or k8.shape != v8.shape:
        raise ValueError(f"k and v must share shape and strides (got {tuple(k8.shape)} {k8.stride()} and "
                         f"{tuple(v8.shape)} {v8.stride()})")
    return _graph(q8, k8, v8, scale).run(q8, k8, v8, scalars, q8.device)


def _run(q, k, v, scale, rows: int, qk_descale, v_descale=None):
    why = supports(q, k, v, qk_fp8=q.dtype == torch.float8_e4m3fn, v_fp8=v.dtype == torch.float8_e4m3fn)
    if why:
        raise RuntimeError(f"fp8 SDPA cannot run: {why}")
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    q8, k8, v8, scalars, row_descale = fp8_qkv.quantize_qkv(q, k, v, P_SCALE, O_HEADROOM, rows, qk_descale,
                                                            v_descale)
    return sdpa_fp8_quantized(q8, k8, v8, scalars, scale), scalars, row_descale


def sdpa_fp8(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * scale) v on (B, S, heads, head_dim) bf16/fp16 tensors through cuDNN's fp8 SDPA;
    the output has q's dtype, shape (B, S_q, heads, head_dim) and is contiguous."""
    out, scalars, _ = _run(q, k, v, scale, 0, None)
    return scale_cast(out, fp8_qkv.scalar(scalars, fp8_qkv.DESCALE_O), q.dtype, False)


def sdpa_fp8_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
                  qk_descale: torch.Tensor | None = None, v_descale: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The same attention with O left in e4m3: (O (B, S_q, heads, head_dim) float8_e4m3fn, contiguous;
    its descale once per row of O seen as (B * S_q, heads * head_dim), fp32), which an fp8 GEMM takes
    as they are (`runtime.quant.QuantizedRows`). q and k bf16/fp16, or float8_e4m3fn with
    `qk_descale` (their two scales: `kernels.fp8_qkv.quantize_qkv`); v bf16/fp16, or float8_e4m3fn
    with `v_descale` (its scale, (1,))."""
    out, _, row_descale = _run(q, k, v, scale, q.shape[0] * q.shape[1], qk_descale, v_descale)
    return out, row_descale


@torch.library.custom_op("ltx_tui::sdpa_fp8_rows", mutates_args=())
def _sdpa_fp8_rows_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qk_descale: torch.Tensor | None,
                      scale: float, v_descale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    return sdpa_fp8_rows(q, k, v, scale, qk_descale, v_descale)


@_sdpa_fp8_rows_op.register_fake
def _sdpa_fp8_rows_fake(q, k, v, qk_descale, scale, v_descale=None):
    return (q.new_empty(q.shape, dtype=torch.float8_e4m3fn),
            q.new_empty((q.shape[0] * q.shape[1],), dtype=torch.float32))


def sdpa_fp8_rows_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qk_descale: torch.Tensor | None = None,
                     scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`sdpa_fp8_rows` itself when called eagerly; its custom op while torch.compile traces."""
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    if torch.compiler.is_compiling():
        return _sdpa_fp8_rows_op(q, k, v, qk_descale, scale)
    return sdpa_fp8_rows(q, k, v, scale, qk_descale)
