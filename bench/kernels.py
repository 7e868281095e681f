"""The hot ops of LTX-2's DiT and DiffVAE decoder at their real shapes, on one CUDA device, one run.

Part 1, the fp8 GEMMs of an LTX-2 block (6144 and 24576 video tokens; 4096 -> 4096, 4096 -> 16384,
16384 -> 4096): bf16 `F.linear` against `torch._scaled_mm` with row-wise scales, with and without
`use_fast_accum` (Hopper's fp8 tensor cores then skip the periodic promotion of partial sums to
fp32), activation quantization included. rel L2 against an fp32 product of the bf16 operands.

Part 3 (`attention`), the DiT's head_dim-128 attentions (32 heads; video self at 1536, 6144 and
24576 tokens, the video-text cross at 6144 x 1024): SDPA's bf16 cuDNN backend against cuDNN's fp8
SDPA (`backends.runtime.cudnn_fp8_attention`), the kernel alone (its host-side call included: at
small sizes that can bound it) and with its per-tensor quantization and the output's
dequantization; rel L2 against fp32 attention on four heads, for q of std 1 and 4.

Part 4 (`gelu`), the DiT FeedForward's hidden activation (6144 and 24576 tokens x 16384) on its way
into the second fp8 GEMM: tanh GELU then the row quantization (two passes; what Inductor leaves:
the quantization is a Triton kernel it cannot fuse into) against `quantize_rows(gelu=True)` (one),
and the quantization alone; rel L2 of the dequantized rows against an fp32 GELU.

Part 5 (`rows`), the memory rate (GB/s: bytes read and written / time) of the DiT's memory-bound
passes: the fp8 row quantization at the block's activation shapes, the AdaLN norm + modulation as
Inductor compiles it, and the fp8 attention's q/k/v quantization.

Part 6 (`adaln`), LTX-2's DiT block norms at 6144 and 24576 tokens x 4096, the modulation one row
(uniform timesteps, `runtime.timestep_rows`) and per token: its `ada_zero_function` (rms_norm(x) *
(1 + scale) + shift) and `post_sa_function` ((x + y * gate, rms_norm of that)) as LTX-2's eager
ops, compiled by Inductor (its defaults, and `triton.multi_kernel = 1`: persistent reductions for
rows up to 16384, timed against the looped ones), and `kernels.adaln` (one pass each); then the fp8
rows an fp8-scaled-mm linear takes of ada_zero's output (`quantize_rows`): two kernels, Inductor
fusing the quantization traced as torch ops, and `kernels.adaln.ada_zero_fp8` (one pass); then a
block's edge as Inductor fuses it (the gated residual kept, the next ada_zero's fp8 rows). GB/s
counts each tensor read or written once; rel L2 against the ops in fp32.

Part 7 (`qk`), the DiT's pre-attention (q_norm, k_norm over 4096 = 32 heads x 128, then the SPLIT
RoPE with (1, 32, T, 64) bf16 tables laid out as LTX-2 makes them) at 6144 and 24576 tokens, q and k
of one self-attention: the ops as LTX-2 runs them eagerly, compiled by Inductor, and
`kernels.dit_qk` (one launch for both; bf16 out, and e4m3 out with scales); then the host's time
to issue one call, the kernel called directly and through its custom op (`ltx_tui::dit_qk`, as a
compiled block calls it). GB/s counts q, k, the tables and the outputs once.

Part 8 (`few`), the GEMMs of LTX-2's 126 audio tokens (2048 -> 2048, 2048 -> 8192, 8192 -> 2048;
64, 256 and 512 rows too), each timed inside a CUDA graph (as compile.capture runs them): cuBLAS's
`torch._scaled_mm` with its row quantization (and without) against `kernels.fp8_small_mm` on the
same fp8 rows; `--few-configs` times (BM, BN, BK, split, warps, stages) tilings beside the default. rel L2 against an fp32 product of the bf16 operands.

Part 2, the decoder's stage-5 MLP (x += swiglu(modulate(rms_norm(x))), 128 channels, hidden 512)
at 768x512x121 (121 x 128 x 192 tokens): LTX-2's `ltx_core::swiglu_tiled_residual_modulated`
(its tiles of 16384 tokens, and of 262144: the tile ltx-tui configured before this kernel) against
`kernels.swiglu_residual` per config; max |diff| against LTX-2's 16384-token result.

    python bench/kernels.py [--parts gemm,mlp,attention,gelu,rows,adaln,qk,few] [--mlp-configs m128h64w8s3,...]
                            [--few-configs 128x64x128x4x4x3,...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernels.int8_gemm import quantize_rows, quantize_rows_torch  # noqa: E402

GEMMS = [(6144, 4096, 4096), (6144, 4096, 16384), (6144, 16384, 4096), (24576, 4096, 16384)]


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


def gemms() -> None:
    print(f"{'M x K x N':<20} {'linear':<30} {'ms':>8} {'TFLOP/s':>8} {'vs bf16':>8} {'rel L2':>9}")
    for m, k, n in GEMMS:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k**-0.5
        ref = x.float() @ w.float().t()
        wf = w.float()
        ws = wf.abs().amax(1).clamp(min=1e-12) / 448.0
        w8 = (wf / ws[:, None]).to(torch.float8_e4m3fn)
        tf = 2 * m * k * n / 1e9

        def fp8(fast: bool):
            xq, xs = quantize_rows(x, torch.float8_e4m3fn)
            return torch._scaled_mm(xq, w8.t(), scale_a=xs[:, None], scale_b=ws[None, :], out_dtype=torch.bfloat16,
                                    use_fast_accum=fast)

        rows = [("bf16 F.linear", lambda: F.linear(x, w)), ("fp8 row scales", lambda: fp8(False)),
                ("fp8 row scales, fast accum", lambda: fp8(True))]
        base = None
        for name, fn in rows:
            t = bench(fn)
            base = base or t
            print(f"{f'{m}x{k}x{n}':<20} {name:<30} {t:8.3f} {tf / t:8.0f} {base / t:7.2f}x {rel_l2(fn(), ref):9.2e}")


def mlps(configs: list[str]) -> None:
    from backends.runtime import ltx2

    ltx2.import_ltx_core()
    from ltx_core.model.video_vae.transformer.chunked.mlp import _chunked_residual_modulated_impl
    from ltx_core.model.video_vae.transformer.swiglu import SwiGLUTileSpec, token_intervals

    from kernels.swiglu_residual import swiglu_residual_

    c, hidden, n = 128, 512, 121 * 128 * 192
    g = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*shape, std=1.0):
        return (torch.randn(*shape, device="cuda", generator=g) * std).to(torch.bfloat16)

    x0 = rnd(1, n, c)
    nw, sc, sh = 1 + rnd(c, std=0.1), rnd(1, 1, c, std=0.1), rnd(1, 1, c, std=0.1)
    wg, wu, wd = rnd(hidden, c, std=c**-0.5), rnd(hidden, c, std=c**-0.5), rnd(c, hidden, std=hidden**-0.5)
    flop = 6 * n * c * hidden / 1e9

    def ltx2_op(tile):
        def run(x):
            _chunked_residual_modulated_impl(x, nw, sc, sh, wg, wu, wd, token_intervals(n, SwiGLUTileSpec(
                tile_size=tile)), use_triton=True)
        return run

    rows = [("LTX-2, 16384-token tiles", ltx2_op(16384)), ("LTX-2, 262144-token tiles", ltx2_op(262144))]
    rows += [(f"ltx-tui {cfg}", lambda x, cfg=cfg: swiglu_residual_(x, nw, sc, sh, wg, wu, wd, config=cfg))
             for cfg in configs]  # an unknown config fails with the list of known ones
    print(f"{'stage-5 MLP, tokens':<24} {'op':<28} {'ms':>8} {'TFLOP/s':>8} {'vs LTX-2':>8} {'max diff':>9}")
    ref = x0.clone()
    rows[0][1](ref)
    base = None
    for name, fn in rows:
        x = x0.clone()
        fn(x)  # compiles, and the result to compare
        diff = (x.float() - ref.float()).abs().max().item()
        t = bench(lambda: fn(x))  # in place: x drifts, the work per call does not
        base = base or t
        print(f"{n:<24} {name:<28} {t:8.3f} {flop / t:8.0f} {base / t:7.2f}x {diff:9.2e}")


ATTENTIONS = [("video self 1536", 1536, 1536), ("video self 6144", 6144, 6144),
              ("text cross 6144x1024", 6144, 1024), ("video self 24576", 24576, 24576)]


def attentions() -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from backends.runtime import cudnn_fp8_attention as fp8

    probe = torch.zeros(1, 16, 1, 128, device="cuda", dtype=torch.bfloat16)
    why = fp8.supports(probe, probe, probe)
    if why:
        print(f"attention part skipped: {why}")
        return
    print(f"cuDNN {fp8._cudnn().backend_version()}")
    print(f"{'shape':<22} {'backend':<30} {'ms':>8} {'TFLOP/s':>8} {'vs bf16':>8} {'rel L2 s=1':>10} {'rel L2 s=4':>10}")
    h, d = 32, 128

    def cudnn_bf16(q, k, v):
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                  v.transpose(1, 2)).transpose(1, 2)

    def kernel_only(q, k, v):
        from kernels.fp8_qkv import quantize_qkv

        q8, k8, v8, scalars = quantize_qkv(q, k, v, fp8.P_SCALE, fp8.O_HEADROOM)
        return lambda: fp8.sdpa_fp8_quantized(q8, k8, v8, scalars, d**-0.5)

    for label, sq_len, skv in ATTENTIONS:
        errors: dict[str, list[float]] = {}
        for std in (1.0, 4.0):
            q = torch.randn(1, sq_len, h, d, device="cuda", dtype=torch.bfloat16) * std
            k = torch.randn(1, skv, h, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(1, skv, h, d, device="cuda", dtype=torch.bfloat16)
            ref = F.scaled_dot_product_attention(*(t[:, :, :4].transpose(1, 2).float() for t in (q, k, v))).transpose(1, 2)
            for name, fn in (("sdpa cuDNN bf16", cudnn_bf16), ("cuDNN fp8, quantize included", fp8.sdpa_fp8)):
                errors.setdefault(name, []).append(rel_l2(fn(q, k, v)[:, :, :4], ref))
        flop = 4 * sq_len * skv * d * h / 1e9
        rows = [("sdpa cuDNN bf16", lambda: cudnn_bf16(q, k, v)), ("cuDNN fp8 kernel", kernel_only(q, k, v)),
                ("cuDNN fp8, quantize included", lambda: fp8.sdpa_fp8(q, k, v))]
        base = None
        for name, fn in rows:
            t = bench(fn)
            base = base or t
            e = errors.get(name, errors["cuDNN fp8, quantize included"])  # the kernel row: the same numbers
            print(f"{label:<22} {name:<30} {t:8.3f} {flop / t:8.0f} {base / t:7.2f}x {e[0]:10.2e} {e[1]:10.2e}")


def gelus() -> None:
    print(f"{'tokens x hidden':<18} {'op':<34} {'ms':>8} {'GB/s':>8} {'vs 2 passes':>11} {'rel L2':>9}")
    gelu = torch.compile(lambda h: F.gelu(h, approximate="tanh"))  # one Inductor kernel, as in a compiled block
    for m in (6144, 24576):
        h = torch.randn(m, 16384, device="cuda", dtype=torch.bfloat16) * 2
        ref = F.gelu(h.float(), approximate="tanh")
        rows = [("GELU, then quantize_rows", lambda: quantize_rows(gelu(h), torch.float8_e4m3fn)),
                ("quantize_rows(gelu=True)", lambda: quantize_rows(h, torch.float8_e4m3fn, gelu=True)),
                ("quantize_rows alone (no GELU)", lambda: quantize_rows(h, torch.float8_e4m3fn))]
        base = None
        for name, fn in rows:
            t = bench(fn)
            base = base or t
            q, sc = fn()
            err = rel_l2(q.float() * sc[:, None], ref) if "alone" not in name else float("nan")
            print(f"{f'{m} x 16384':<18} {name:<34} {t:8.3f} {h.numel() * 3 / t / 1e6:8.0f} {base / t:10.2f}x "
                  f"{err:9.2e}")


ROW_SHAPES = [(6144, 4096, False), (6144, 2048, False), (24576, 4096, False), (6144, 16384, True),
              (24576, 16384, True), (1024, 4096, False)]


def rows() -> None:
    """The memory rate of the DiT's memory-bound passes at its shapes: the fp8 row quantization
    (`quantize_rows`), the AdaLN norm and modulation as Inductor compiles it, and the fp8
    attention's q/k/v quantization (`fp8_qkv.quantize_qkv`)."""
    from kernels.fp8_qkv import quantize_qkv

    print(f"{'M x K':<18} {'op':<26} {'ms':>8} {'GB/s':>8}")
    for m, k, gelu in ROW_SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        t = bench(lambda: quantize_rows(x, torch.float8_e4m3fn, gelu))
        print(f"{f'{m} x {k}':<18} {'quantize_rows' + ('(gelu=True)' if gelu else ''):<26} {t:8.4f} "
              f"{m * k * 3 / t / 1e6:8.0f}")

    def ada(x, scale, shift):  # LTX-2's AdaLN: rms_norm(x) * (1 + scale) + shift
        return (F.rms_norm(x.float(), (x.shape[-1],), eps=1e-6) * (1 + scale) + shift).to(x.dtype)

    x = torch.randn(1, 6144, 4096, device="cuda", dtype=torch.bfloat16)
    sc, sh = (torch.randn(1, 1, 4096, device="cuda", dtype=torch.bfloat16) * 0.1 for _ in range(2))
    fn = torch.compile(ada)
    t = bench(lambda: fn(x, sc, sh))
    print(f"{'6144 x 4096':<18} {'AdaLN, Inductor':<26} {t:8.4f} {x.numel() * 4 / t / 1e6:8.0f}")
    q, k, v = (torch.randn(1, 6144, 32, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    t = bench(lambda: quantize_qkv(q, k, v, 256.0, 2.0))
    print(f"{'3 x 6144 x 4096':<18} {'fp8_qkv.quantize_qkv':<26} {t:8.4f} {q.numel() * 3 * 5 / t / 1e6:8.0f}"
          f"  (2 reads + 1 write)")


def adalns() -> None:
    """LTX-2's ada_zero and post_sa: its eager ops, Inductor's, `kernels.adaln`'s one pass."""
    from kernels import adaln

    def eager_ada(x, eps, scale, shift):  # LTX-2's PytorchAdaZeroFunction
        return F.rms_norm(x, (x.shape[-1],), eps=eps) * (1 + scale) + shift

    def eager_post(x, y, w, eps, gate):  # LTX-2's PytorchPostSAFunction
        fma = x + y * gate
        return [fma, F.rms_norm(fma, (x.shape[-1],), w, eps=eps)]

    def ada_rows(x, eps, scale, shift):  # ada_zero, then the fp8 rows of an fp8-scaled-mm linear's input
        return quantize_rows_torch(eager_ada(x, eps, scale, shift).flatten(0, 1), torch.float8_e4m3fn)

    def block_edge(x, y, gate, eps, scale, shift):  # the gated residual, the next ada_zero and its fp8 rows
        x = x + y * gate
        return x, ada_rows(x, eps, scale, shift)

    compiled_ada, compiled_post = torch.compile(eager_ada, dynamic=False), torch.compile(eager_post, dynamic=False)
    multi = {"triton.multi_kernel": 1}
    multi_ada, multi_post = (torch.compile(f, dynamic=False, options=multi) for f in (eager_ada, eager_post))
    traced_rows, multi_rows = torch.compile(ada_rows, dynamic=False), torch.compile(ada_rows, dynamic=False, options=multi)
    traced_edge, multi_edge = (torch.compile(block_edge, dynamic=False, options=o) for o in (None, multi))
    print(f"{'tokens, modulation':<22} {'op':<30} {'ms':>8} {'GB/s':>8} {'vs eager':>9} {'rel L2':>9}")
    for m in (6144, 24576):
        for per_row in (1, m):
            x, y = (torch.randn(1, m, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            # as LTX-2's get_ada_values makes them: slices of one (1, rows, 9, 4096) tensor
            ada = torch.randn(1, per_row, 9, 4096, device="cuda", dtype=torch.bfloat16) * 0.1
            shift, scale, gate = ada[:, :, 0], ada[:, :, 1], ada[:, :, 2]
            mods = 2 * per_row * 4096 * 2  # bytes of scale + shift
            ref = adaln.ada_zero_torch(x.float(), 1e-6, scale.float(), shift.float())
            base = None
            for name, fn in (("ada_zero, LTX-2 eager", lambda: eager_ada(x, 1e-6, scale, shift)),
                             ("ada_zero, Inductor", lambda: compiled_ada(x, 1e-6, scale, shift)),
                             ("ada_zero, Inductor multi-kernel", lambda: multi_ada(x, 1e-6, scale, shift)),
                             ("ada_zero, kernels.adaln", lambda: adaln.ada_zero(x, 1e-6, scale, shift))):
                t = bench(fn)
                base = base or t
                print(f"{f'{m}, {per_row} row(s)':<22} {name:<30} {t:8.4f} {(x.numel() * 4 + mods) / t / 1e6:8.0f} "
                      f"{base / t:8.2f}x {rel_l2(fn().float(), ref):9.2e}")
            ref = adaln.post_sa_torch(x.float(), y.float(), None, 1e-6, gate.float())[1]
            base = None
            for name, fn in (("post_sa, LTX-2 eager", lambda: eager_post(x, y, None, 1e-6, gate)),
                             ("post_sa, Inductor", lambda: compiled_post(x, y, None, 1e-6, gate)),
                             ("post_sa, Inductor multi-kernel", lambda: multi_post(x, y, None, 1e-6, gate)),
                             ("post_sa, kernels.adaln", lambda: adaln.post_sa(x, y, None, 1e-6, gate))):
                t = bench(fn)
                base = base or t
                print(f"{f'{m}, {per_row} row(s)':<22} {name:<30} {t:8.4f} "
                      f"{(x.numel() * 8 + per_row * 4096 * 2) / t / 1e6:8.0f} {base / t:8.2f}x "
                      f"{rel_l2(fn()[1].float(), ref):9.2e}")
            # the fp8 rows an fp8-scaled-mm linear takes (x read, fp8 rows written: 3 bytes an element)
            ref = adaln.ada_zero_torch(x.float(), 1e-6, scale.float(), shift.float()).flatten(0, 1)
            base = None
            for name, fn in (("ada_zero + rows, 2 kernels", lambda: quantize_rows(
                                  adaln.ada_zero(x, 1e-6, scale, shift).flatten(0, 1), torch.float8_e4m3fn)),
                             ("ada_zero + rows, Inductor", lambda: traced_rows(x, 1e-6, scale, shift)),
                             ("ada_zero + rows, Ind. multi-k.", lambda: multi_rows(x, 1e-6, scale, shift)),
                             ("ada_zero + rows, kernels.adaln", lambda: adaln.ada_zero_fp8(x, 1e-6, scale, shift)[:2])):
                t = bench(fn)
                base = base or t
                q, sc = fn()
                print(f"{f'{m}, {per_row} row(s)':<22} {name:<30} {t:8.4f} {(x.numel() * 3 + mods) / t / 1e6:8.0f} "
                      f"{base / t:8.2f}x {rel_l2(q.float() * sc[:, None], ref):9.2e}")
            # a block's edge: x + y * gate kept, then the next ada_zero's fp8 rows (x, y read; x, rows written)
            base = None
            for name, fn in (("edge, Inductor", lambda: traced_edge(x, y, gate, 1e-6, scale, shift)),
                             ("edge, Inductor multi-kernel", lambda: multi_edge(x, y, gate, 1e-6, scale, shift))):
                t = bench(fn)
                base = base or t
                print(f"{f'{m}, {per_row} row(s)':<22} {name:<30} {t:8.4f} {(x.numel() * 7 + mods) / t / 1e6:8.0f} "
                      f"{base / t:8.2f}x {'':>9}")


def qks() -> None:
    """LTX-2's q/k RMSNorm + SPLIT RoPE: eager ops, Inductor, `kernels.dit_qk`; the host's issue time."""
    import time

    import backends.runtime.fast_norm  # noqa: F401  (defines ltx_tui::dit_qk)
    from kernels import dit_qk

    heads, half = 32, 64

    def eager(q, k, wq, wk, cos, sin):  # rms_norm, then each head's halves rotated by its (cos, sin)
        out = []
        for t, w in ((q, wq), (k, wk)):
            t = F.rms_norm(t, (t.shape[-1],), w, eps=1e-6)
            x = t.unflatten(-1, (heads, 2, half)).transpose(1, 2)  # (B, H, T, 2, half)
            c, s_ = cos.unsqueeze(-2), sin.unsqueeze(-2)
            x1, x2 = x[..., :1, :], x[..., 1:, :]
            out.append(torch.cat([x1 * c - x2 * s_, x2 * c + x1 * s_], -2).transpose(1, 2).flatten(-3))
        return out

    compiled = torch.compile(eager, dynamic=False)
    print(f"{'tokens':<8} {'op':<36} {'ms':>8} {'GB/s':>8} {'vs eager':>9} {'rel L2':>9}")
    for m in (6144, 24576):
        q, k = (torch.randn(1, m, heads * 2 * half, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        wq, wk = (torch.rand(heads * 2 * half, device="cuda", dtype=torch.bfloat16) + 0.5 for _ in range(2))
        ang = torch.rand(1, m, heads, half, device="cuda") * 6  # (B, T, H, half) stored, seen as (B, H, T, half)
        cos, sin = (f(ang).to(torch.bfloat16).transpose(1, 2) for f in (torch.cos, torch.sin))
        ref = [dit_qk.norm_rope_torch(t, w, 1e-6, (cos, sin), heads, torch.float32) for t, w in ((q, wq), (k, wk))]
        scales = torch.stack([r.abs().amax() / 400 for r in ref])
        moved = 2 * q.numel() * 2 + 2 * cos.numel() * 2  # q, k and the tables read
        base = None
        for name, fn, out_bytes in (
                ("LTX-2's ops, eager", lambda: eager(q, k, wq, wk, cos, sin), 2),
                ("LTX-2's ops, Inductor", lambda: compiled(q, k, wq, wk, cos, sin), 2),
                ("kernels.dit_qk", lambda: dit_qk.qk_norm_rope(q, k, wq, wk, 1e-6, heads, (cos, sin)), 2),
                ("kernels.dit_qk, e4m3 out", lambda: dit_qk.qk_norm_rope(q, k, wq, wk, 1e-6, heads, (cos, sin),
                                                                          scales=scales), 1)):
            t = bench(fn)
            base = base or t
            got = fn()
            err = max(rel_l2(g.float() * (sc if g.dtype == torch.float8_e4m3fn else 1), r)
                      for g, r, sc in zip(got, ref, scales))
            print(f"{m:<8} {name:<36} {t:8.4f} {(moved + 2 * q.numel() * out_bytes) / t / 1e6:8.0f} "
                  f"{base / t:8.2f}x {err:9.2e}")
        for name, fn in (("host: kernels.dit_qk, direct", lambda: dit_qk.qk_norm_rope(q, k, wq, wk, 1e-6, heads,
                                                                                        (cos, sin), scales=scales)),
                         ("host: ltx_tui::dit_qk op", lambda: torch.ops.ltx_tui.dit_qk(q, k, wq, wk, 1e-6, heads, cos,
                                                                                      sin, None, None, scales))):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(50):
                fn()
            issue = (time.perf_counter() - t0) / 50 * 1e6
            torch.cuda.synchronize()
            print(f"{m:<8} {name:<36} {issue:8.1f} us a call to issue (the GPU's time above)")


FEW = [(126, 2048, 2048), (126, 2048, 8192), (126, 8192, 2048), (64, 2048, 2048), (256, 2048, 2048),
       (512, 2048, 2048)]


def fews(configs: list[tuple[int, ...]]) -> None:
    from kernels.fp8_small_mm import small_rows_mm, tiling

    print(f"{'M x K x N':<18} {'GEMM (in a CUDA graph)':<44} {'us':>8} {'GB/s':>7} {'vs cuBLAS':>9} {'rel L2':>9}")
    for m, k, n in FEW:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k**-0.5
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16) * 0.1
        ref = x.float() @ w.float().t() + bias.float()
        ws = w.float().abs().amax(1).clamp(min=1e-12) / 448.0
        w8 = (w.float() / ws[:, None]).to(torch.float8_e4m3fn)
        xq, xs = quantize_rows(x, torch.float8_e4m3fn)

        def cublas(quantize: bool):
            q, s = quantize_rows(x, torch.float8_e4m3fn) if quantize else (xq, xs)
            return torch._scaled_mm(q, w8.t(), scale_a=s[:, None], scale_b=ws[None, :], bias=bias,
                                    out_dtype=torch.bfloat16, use_fast_accum=True)

        rows = [("cuBLAS _scaled_mm + row quantization", lambda: cublas(True)),
                ("cuBLAS _scaled_mm (rows already fp8)", lambda: cublas(False))]
        for cfg in [None, *configs]:
            tag = "x".join(map(str, cfg or tiling(m, n, k)))
            rows.append((f"fp8_small_mm {tag}", lambda c=cfg: small_rows_mm(xq, xs, w8, ws, bias, config=c)))
        base = None
        for name, fn in rows:
            try:
                fn()
            except triton.runtime.errors.OutOfResources as exc:
                print(f"{f'{m}x{k}x{n}':<18} {name:<44} does not fit: {exc}")
                continue
            t = triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median") * 1e3
            base = base or t
            gb = (n * k + m * k * 2 + m * n * 2) / t / 1e3
            print(f"{f'{m}x{k}x{n}':<18} {name:<44} {t:8.2f} {gb:7.0f} {base / t:8.2f}x {rel_l2(fn(), ref):9.2e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="gemm,mlp")
    ap.add_argument("--mlp-configs", default="")
    ap.add_argument("--few-configs", default="", help="BMxBNxBKxSPLITxWARPSxSTAGES,... for part `few`")
    args = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    parts = args.parts.split(",")
    if "gemm" in parts:
        gemms()
    if "mlp" in parts:
        from kernels.swiglu_residual import CONFIGS

        mlps(args.mlp_configs.split(",") if args.mlp_configs else list(CONFIGS))
    if "attention" in parts:
        attentions()
    if "gelu" in parts:
        gelus()
    if "rows" in parts:
        rows()
    if "adaln" in parts:
        adalns()
    if "qk" in parts:
        qks()
    if "few" in parts:
        fews([tuple(int(v) for v in c.split("x")) for c in args.few_configs.split(",") if c])


if __name__ == "__main__":
    main()
