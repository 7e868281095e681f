"""Fused 3D neighborhood attention forward in Triton.

Each program owns a (TT, TH, TW) tile of queries of one (batch, head). The union of the
tile's windows (its KV halo) is walked once, in blocks of RH rows x RW columns of keys at one
time step; every block lies inside some query's window, nothing outside the halo is read.
Scores are masked to each query's own window, softmax is online with fp32 accumulation.
Tile shapes are autotuned per (kernel size, causal axes, head_dim, dtype, size class): a small
grid wants smaller tiles than the decoder's. A key's first call compiles the tiles to time in
threads (`precompile`), then the autotuner times them (unless Triton's disk cache holds the
key's choice from an earlier process: then only that tile compiles). Later calls launch the chosen tile's
compiled kernel straight (`_launch_tile`), and a call seen before replays its whole launch
(`_PLANS`): neither pays the autotuner's, heuristics' or Triton's own per-call work (tens of
microseconds, more than a small problem's kernel takes).
"""

from __future__ import annotations

import inspect
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.na3d_args import BoolOr3, IntOr3, Triple, check_na3d

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256
MAX_GRID_Y = 65535
LOG2E = 1.4426950408889634


@triton.jit
def _window(p, length, K: tl.constexpr, CAUSAL: tl.constexpr):
    """(start, end) of the window of position(s) p on an axis of `length`."""
    if CAUSAL:
        start = tl.maximum(p - K + 1, 0)
        end = p + 1
    else:
        start = tl.minimum(tl.maximum(p - K // 2, 0), length - K)
        end = start + K
    return start, end


@triton.jit
def _na3d_tile(
    Q, K, V, O,
    sq_b, sq_t, sq_h, sq_w, sq_n,
    sk_b, sk_t, sk_h, sk_w, sk_n,
    sv_b, sv_t, sv_h, sv_w, sv_n,
    so_b, so_t, so_h, so_w, so_n,
    T, H, W, HEADS, qk_scale, bh_offset,
    D: tl.constexpr, BLOCK_D: tl.constexpr,
    KT: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
    CT: tl.constexpr, CH: tl.constexpr, CW: tl.constexpr,
    TT: tl.constexpr, TH: tl.constexpr, TW: tl.constexpr,
    RHE: tl.constexpr, RW: tl.constexpr, PRECISION: tl.constexpr,
):
    # One program: a (TT, TH, TW) query tile of one (batch, head).
    BM: tl.constexpr = TT * TH * TW
    BN: tl.constexpr = RHE * RW
    pid = tl.program_id(0)
    bh = tl.program_id(1) + bh_offset
    b = (bh // HEADS).to(tl.int64)
    n = (bh % HEADS).to(tl.int64)
    n_tw = tl.cdiv(W, TW)
    n_th = tl.cdiv(H, TH)
    t0 = (pid // (n_tw * n_th)) * TT
    h0 = ((pid // n_tw) % n_th) * TH
    w0 = (pid % n_tw) * TW

    # Queries of this tile, clamped so padding lanes still have valid windows.
    m = tl.arange(0, BM)
    qt = t0 + m // (TH * TW)
    qh = h0 + (m // TW) % TH
    qw = w0 + m % TW
    q_ok = (qt < T) & (qh < H) & (qw < W)
    qt = tl.minimum(qt, T - 1)
    qh = tl.minimum(qh, H - 1)
    qw = tl.minimum(qw, W - 1)
    st_t, en_t = _window(qt, T, KT, CT)
    st_h, en_h = _window(qh, H, KH, CH)
    st_w, en_w = _window(qw, W, KW, CW)

    # The tile's KV halo: windows start and end monotonically along each axis.
    ht0, _ = _window(t0, T, KT, CT)
    _, ht1 = _window(tl.minimum(t0 + TT, T) - 1, T, KT, CT)
    hh0, _ = _window(h0, H, KH, CH)
    _, hh1 = _window(tl.minimum(h0 + TH, H) - 1, H, KH, CH)
    hw0, _ = _window(w0, W, KW, CW)
    _, hw1 = _window(tl.minimum(w0 + TW, W) - 1, W, KW, CW)

    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    q_off = qt.to(tl.int64) * sq_t + qh.to(tl.int64) * sq_h + qw.to(tl.int64) * sq_w
    q = tl.load(Q + b * sq_b + n * sq_n + q_off[:, None] + d[None, :], mask=q_ok[:, None] & d_ok[None, :], other=0.0)

    nn = tl.arange(0, BN)
    kw = hw0 + nn % RW
    kw_ok = kw < hw1
    row = nn // RW
    w_in = (st_w[:, None] <= kw[None, :]) & (kw[None, :] < en_w[:, None])
    kw_off = kw.to(tl.int64)
    k_base = K + b * sk_b + n * sk_n
    v_base = V + b * sv_b + n * sv_n

    m_i = tl.full([BM], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BM], dtype=tl.float32)
    acc = tl.zeros([BM, BLOCK_D], dtype=tl.float32)
    n_hb = tl.cdiv(hh1 - hh0, RHE)
    for i in range(0, (ht1 - ht0) * n_hb):
        kt = ht0 + i // n_hb
        kh = hh0 + (i % n_hb) * RHE + row
        ok = (kh < hh1) & kw_ok
        kt64 = kt.to(tl.int64)
        kh64 = kh.to(tl.int64)
        k = tl.load(k_base + (kt64 * sk_t + kh64 * sk_h + kw_off * sk_w)[:, None] + d[None, :],
                    mask=ok[:, None] & d_ok[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        inside = ((st_t <= kt) & (kt < en_t))[:, None] & w_in
        inside &= (st_h[:, None] <= kh[None, :]) & (kh[None, :] < en_h[:, None])
        s = tl.where(inside, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + (kt64 * sv_t + kh64 * sv_h + kw_off * sv_w)[:, None] + d[None, :],
                    mask=ok[:, None] & d_ok[None, :], other=0.0)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
        m_i = m_new

    out = acc / l_i[:, None]
    o_off = qt.to(tl.int64) * so_t + qh.to(tl.int64) * so_h + qw.to(tl.int64) * so_w
    tl.store(O + b * so_b + n * so_n + o_off[:, None] + d[None, :], out.to(O.dtype.element_ty),
             mask=q_ok[:, None] & d_ok[None, :])


@triton.jit(do_not_specialize=["SIZE"])
def _na3d_fwd(
    Q, K, V, O,
    sq_b, sq_t, sq_h, sq_w, sq_n,
    sk_b, sk_t, sk_h, sk_w, sk_n,
    sv_b, sv_t, sv_h, sv_w, sv_n,
    so_b, so_t, so_h, so_w, so_n,
    T, H, W, HEADS, qk_scale, bh_offset, SIZE,
    D: tl.constexpr, BLOCK_D: tl.constexpr,
    KT: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
    CT: tl.constexpr, CH: tl.constexpr, CW: tl.constexpr,
    TT: tl.constexpr, TH: tl.constexpr, TW: tl.constexpr,
    RH: tl.constexpr, RHE: tl.constexpr, RW: tl.constexpr, PRECISION: tl.constexpr,
):
    # Any strides per tensor. SIZE: the autotune key's size class (not read); RH: the key rows per
    # block asked for, RHE: those used.
    _na3d_tile(Q, K, V, O, sq_b, sq_t, sq_h, sq_w, sq_n, sk_b, sk_t, sk_h, sk_w, sk_n,
               sv_b, sv_t, sv_h, sv_w, sv_n, so_b, so_t, so_h, so_w, so_n, T, H, W, HEADS, qk_scale, bh_offset,
               D, BLOCK_D, KT, KH, KW, CT, CH, CW, TT, TH, TW, RHE, RW, PRECISION)


@triton.jit(do_not_specialize=["SIZE"])
def _na3d_fwd_shared(
    Q, K, V, O, s_b, s_t, s_h, s_w, s_n, T, H, W, HEADS, qk_scale, bh_offset, SIZE,
    D: tl.constexpr, BLOCK_D: tl.constexpr,
    KT: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
    CT: tl.constexpr, CH: tl.constexpr, CW: tl.constexpr,
    TT: tl.constexpr, TH: tl.constexpr, TW: tl.constexpr,
    RH: tl.constexpr, RHE: tl.constexpr, RW: tl.constexpr, PRECISION: tl.constexpr,
):
    # q, k, v and the output share their strides: 15 arguments fewer to bind on every launch.
    _na3d_tile(Q, K, V, O, s_b, s_t, s_h, s_w, s_n, s_b, s_t, s_h, s_w, s_n,
               s_b, s_t, s_h, s_w, s_n, s_b, s_t, s_h, s_w, s_n, T, H, W, HEADS, qk_scale, bh_offset,
               D, BLOCK_D, KT, KH, KW, CT, CH, CW, TT, TH, TW, RHE, RW, PRECISION)


@dataclass(frozen=True)
class TileConfig:
    """Query tile (TT, TH, TW), key rows per block RH, and launch settings."""

    TT: int
    TH: int
    TW: int
    RH: int
    num_warps: int = 4
    num_stages: int = 2

    def kwargs(self) -> dict:
        return {"TT": self.TT, "TH": self.TH, "TW": self.TW, "RH": self.RH}


# Every tile here was the fastest on some shape of bench/na3d.py's sweep on an H200 (4x2x8, 2x8x8
# and 1x8x16 never were, and are gone: each config costs a compile and a timing on a first call).
# num_stages 3 of 1x8x8 and 2x4x8 compiled to the same binary as 2 (Triton 3.6 and 3.9, SM 9.0):
# gone too.
CONFIGS = (
    TileConfig(1, 8, 8, 2, 4, 2),
    TileConfig(1, 8, 8, 4, 4, 2),
    TileConfig(2, 4, 8, 2, 4, 2),
    TileConfig(2, 4, 8, 4, 4, 2),
    TileConfig(1, 4, 16, 1, 4, 2),  # wide windows: a halo of 16+ columns fills a 16-wide tile's key block
    TileConfig(1, 4, 8, 2, 4, 2),  # small grids only (size class <= SMALL_CLASS)
    TileConfig(1, 2, 8, 2, 2, 2),
)
SMALL_TILE, SMALL_CLASS = 64, 0
# Small fixed tile for the CPU interpreter (TRITON_INTERPRET=1), where autotuning is pointless.
INTERPRET_CONFIG = TileConfig(1, 2, 8, 1, 4, 1)
PRECOMPILE_THREADS = 8  # tiles compiled at once on a key's first call
SM_GUESS = 132  # the size class counts 64-query tiles per SM of an H100/H200-sized GPU


def _rw(args) -> int:
    """Key columns per block: the tile's halo width, rounded up to a power of two."""
    return triton.next_power_of_2(args["TW"] + args["KW"] - 1)


def _rhe(args) -> int:
    """Key rows per block, raised so a block holds at least 16 keys (tl.dot's minimum)."""
    return max(args["RH"], 16 // _rw(args), 1)


def size_class(bh: int, t: int, h: int, w: int) -> int:
    """log2 of 64-query tiles per SM, clamped to [-4, 4]: problems of one class share a tile choice."""
    return max(-4, min(4, round(math.log2(max(bh * t * h * w / 64 / SM_GUESS, 1e-9)))))


def _queries(c) -> int:
    return c.kwargs["TT"] * c.kwargs["TH"] * c.kwargs["TW"]


def size_key(bh: int, t: int, h: int, w: int) -> int:
    """The autotune key's SIZE: the size class x 8 + which axes are shorter than some tile (T < 2,
    H < 8, W < 16: `_prune` drops tiles by them, so problems that differ there tune apart)."""
    return size_class(bh, t, h, w) * 8 + (t < 2) + 2 * (h < 8) + 4 * (w < 16)


def _prune(configs, named_args, **kwargs):
    """Drop tiles longer than an axis (their lanes would idle) and, above the small size classes,
    the small tiles; keep the smallest if none is left."""
    t, h, w = named_args["T"], named_args["H"], named_args["W"]
    small = named_args["SIZE"] // 8 <= SMALL_CLASS
    fit = [c for c in configs if c.kwargs["TT"] <= t and c.kwargs["TH"] <= max(2, h) and c.kwargs["TW"] <= max(8, w)
           and (small or _queries(c) >= SMALL_TILE)]
    return fit or [min(configs, key=_queries)]


# The first-call compile of the tiles in threads (`precompile`), waiting for the autotuner's first
# timing of the call's key: a key whose choice Triton's disk cache holds is never timed, and then
# nothing is compiled but the chosen tile.
_PENDING = threading.local()


def _quick_bench(fn, quantiles=None, **kwargs):
    """The autotuner's timing of one tile, shorter than Triton's default (25 + 100 ms a tile); the
    key's first timing compiles its tiles first (`_PENDING`)."""
    import triton.testing

    pending, _PENDING.compile = getattr(_PENDING, "compile", None), None
    if pending is not None:
        pending()
    return triton.testing.do_bench(fn, warmup=5, rep=20, quantiles=quantiles)


# The autotune's choice is cached on disk (Triton's cache directory) where this Triton can: a new
# process then skips timing the tile shapes per key (seconds on the DiffVAE's first decode).
_AUTOTUNE_ARGS = {k: v for k, v in (("cache_results", True), ("do_bench", _quick_bench))
                  if k in inspect.signature(triton.autotune).parameters}


def _autotuned(kernel):
    return triton.autotune(
        configs=[triton.Config(c.kwargs(), num_warps=c.num_warps, num_stages=c.num_stages) for c in CONFIGS],
        key=["KT", "KH", "KW", "CT", "CH", "CW", "D", "SIZE"], prune_configs_by={"early_config_prune": _prune},
        **_AUTOTUNE_ARGS,
    )(triton.heuristics({"RW": _rw, "RHE": _rhe})(kernel))


# Tuned per kernel flavour (shared strides or not), so a first call compiles only the one it runs.
_TUNED = {True: _autotuned(_na3d_fwd_shared), False: _autotuned(_na3d_fwd)}
# (device, kernel, causal, head_dim, dtype, size class, shared strides) -> the launch kwargs of the tile chosen.
_CHOSEN: dict[tuple, dict] = {}


def interpreting() -> bool:
    """Whether Triton kernels run in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def na3d_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel_size: IntOr3, *,
                scale: float | None = None, is_causal: BoolOr3 = False,
                config: TileConfig | None = None) -> torch.Tensor:
    """3D neighborhood attention forward on a CUDA device (or the Triton interpreter)."""
    kernel, causal = check_na3d(q, k, v, kernel_size, is_causal, dtypes=SUPPORTED_DTYPES)
    if q.device.type != "cuda" and not interpreting():
        raise RuntimeError(f"the Triton NA kernel needs a CUDA tensor, got {q.device} "
                           "(use backend 'eager_sdpa' on the CPU, or TRITON_INTERPRET=1 for tests)")
    if q.shape[-1] > MAX_HEAD_DIM:
        raise ValueError(f"head_dim {q.shape[-1]} is larger than {MAX_HEAD_DIM}, the largest the Triton NA "
                         "kernel supports")
    return launch(q, k, v, kernel, causal, scale, config)


def launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel: Triple, causal: tuple[bool, bool, bool],
           scale: float | None = None, config: TileConfig | None = None) -> torch.Tensor:
    """`na3d_triton` on arguments already checked (kernel and causal as triples): its hot path."""
    if isinstance(scale, torch.Tensor):
        scale = float(scale)
    call = None
    if config is None:
        call = (q.shape, q.stride(), k.stride(), v.stride(), q.dtype, q.device, kernel, causal, scale,
                q.data_ptr() % 16 == 0, k.data_ptr() % 16 == 0, v.data_ptr() % 16 == 0)
        plan = _PLANS.get(call)
        if plan is not None:
            out = torch.empty_like(q, memory_format=torch.contiguous_format)
            for run, rest in plan:
                run(q, k, v, out, *rest)
            return out
    # The kernel reads head_dim contiguously; other dims may have any strides.
    copied = q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1
    if copied:
        q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    b, t, h, w, heads, d = q.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    qk_scale = (d ** -0.5 if scale is None else float(scale)) * LOG2E
    size = size_key(b * heads, t, h, w)
    if config is None and interpreting():
        config = INTERPRET_CONFIG
    strides = q.stride()[:5]
    shared = strides == k.stride()[:5] == v.stride()[:5] == out.stride()[:5]
    key = (q.device, kernel, causal, d, q.dtype, size, shared)
    tile = _launch_kwargs(config, kernel, causal, d, q.dtype) if config else _CHOSEN.get(key)
    stride_args = strides if shared else (*strides, *k.stride()[:5], *v.stride()[:5], *out.stride()[:5])
    direct = _na3d_fwd_shared if shared else _na3d_fwd
    steps = []
    for bh_start in range(0, b * heads, MAX_GRID_Y):
        bh_count = min(MAX_GRID_Y, b * heads - bh_start)
        args = (q, k, v, out, *stride_args, t, h, w, heads, qk_scale, bh_start, size)
        if tile is None:  # the first call of this key: the autotuner times the tiles
            tuner = _TUNED[shared]
            grid = lambda c: _grid(t, h, w, c["TT"], c["TH"], c["TW"], bh_count)  # noqa: E731
            meta = _meta(kernel, causal, d, q.dtype)
            named = {"T": t, "H": h, "W": w, "SIZE": size}
            _PENDING.compile = (lambda: precompile(tuner, args, meta, named)) if q.is_cuda else None  # noqa: B023
            try:
                tuner[grid](*args, **meta)
            finally:
                _PENDING.compile = None
            c = tuner.best_config  # (two threads' first calls at once may store either's choice: both run)
            chosen = TileConfig(**c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages)
            tile = _CHOSEN[key] = _launch_kwargs(chosen, kernel, causal, d, q.dtype)
        else:
            grid = _grid(t, h, w, tile["TT"], tile["TH"], tile["TW"], bh_count)
            hit = _launch_tile(key if config is None else None, direct, tile, grid, args, bh_count == b * heads)
            if hit is not None:
                compiled, consts = hit
                steps.append((compiled[(*grid, 1)], (*args[4:], *consts)))
    if call is not None and len(steps) == -(-b * heads // MAX_GRID_Y) and not copied:
        if len(_PLANS) >= _CACHE_MAX:
            _PLANS.clear()
        _PLANS[call] = steps
    return out


def precompile(tuner, args: tuple, meta: dict, named: dict) -> None:
    """Compile the tiles the autotuner is about to time (called at its first timing of a key), in
    threads at once (Triton's compile mostly
    runs outside the GIL: 4 tiles took 1.37 s in 2 threads against 2.7 s one after another on a
    2-core machine, same binaries); the autotuner then finds them compiled. A tile that fails here
    is left to the autotuner, which reports it."""
    configs = _prune(tuner.configs, named)
    if len(configs) < 2:
        return

    def compile_one(config) -> None:
        try:
            tuner.fn.warmup(*args, grid=(1, 1), **meta, **config.all_kwargs())
        except Exception:  # noqa: BLE001 (the autotuner compiles it again and raises what is wrong)
            pass
    compile_one(configs[0])  # alone first: Triton makes its per-device caches on a first compile
    workers = min(len(configs) - 1, os.cpu_count() or 1, PRECOMPILE_THREADS)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(compile_one, configs[1:]))


# Compiled kernels launched straight: (tuned key, tile, every non-tensor argument, the tensors'
# 16-byte alignment) -> (Triton's compiled kernel, its constexprs in parameter order). That key holds all
# Triton specializes a launch on, so the kernel Triton compiled for the first call of a key is the
# one it would pick again. Triton's own launch binds, specializes and hashes 30+ arguments a call
# (~30 us, more than a small problem's kernel takes); this one looks up a tuple.
_COMPILED: dict[tuple, tuple] = {}
# A call's whole launch, once every part of it launched straight: (shapes, strides, dtype, device,
# window, causal axes, scale, the inputs' alignment) -> [(compiled kernel's launcher, its arguments
# after q, k, v, out)]. A call seen before then costs an allocation and a launch.
_PLANS: dict[tuple, list] = {}
_CACHE_MAX = 1024  # entries of each; a full one is cleared
# Whether a straight launch gives Triton's own launch's output: None until the process's first one
# is checked (bit for bit, once); False keeps every launch on Triton's path.
_FAST_OK: list[bool | None] = [None]


def _launch_tile(key: tuple | None, kernel, tile: dict, grid: tuple[int, int], args: tuple,
                 whole: bool) -> tuple | None:
    """Launch `tile` straight from the compiled kernel of an earlier call with the same key and
    arguments (returned, with its constexprs), else through Triton (and remember its compiled
    kernel). `key` None: a tile given by the caller, never remembered; `whole`: this launch writes
    the whole output. The process's first straight launch is checked against Triton's own once."""
    ck = None if key is None or _FAST_OK[0] is False else (
        key, *tile.values(), *args[4:], *(a.data_ptr() % 16 == 0 for a in args[:4]))
    hit = None if ck is None else _COMPILED.get(ck)
    if hit is not None and _FAST_OK[0]:
        compiled, consts = hit
        compiled[(*grid, 1)](*args, *consts)
        return hit
    compiled = kernel[grid](*args, **tile)
    if hit is not None:
        # the process's first straight launch, checked against Triton's own once (not while a CUDA
        # graph is captured: the check reads the outputs back)
        if whole and not _capturing(args[3]):
            _FAST_OK[0] = _same_output(hit, grid, args)
            if _FAST_OK[0] is False:
                _COMPILED.clear()
                _PLANS.clear()
    elif ck is not None and compiled is not None:
        if len(_COMPILED) >= _CACHE_MAX:
            _COMPILED.clear()
        _COMPILED[ck] = (compiled, tuple(tile[name] for name in kernel.arg_names[len(args):]))
    return None


def _capturing(t: torch.Tensor) -> bool:
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def _same_output(hit: tuple, grid: tuple[int, int], args: tuple) -> bool | None:
    """Whether the straight launch writes Triton's output (`args[3]`) bit for bit; None where this
    call cannot tell (an output with NaN or inf, no memory for a second one): a later call checks."""
    compiled, consts = hit
    out = args[3]
    try:
        if not torch.isfinite(out).all():
            return None
        mine = torch.full_like(out, float("nan"))  # a launch that writes nothing cannot match
    except torch.OutOfMemoryError:
        return None
    try:
        compiled[(*grid, 1)](*args[:3], mine, *args[4:], *consts)
        return torch.equal(mine, out)
    except Exception:  # a Triton whose compiled kernels launch otherwise: keep to its own launch
        return False


def _meta(kernel: Triple, causal: tuple[bool, bool, bool], d: int, dtype: torch.dtype) -> dict:
    """The kernel's constexprs that follow from the problem."""
    return dict(D=d, BLOCK_D=max(16, triton.next_power_of_2(d)), KT=kernel[0], KH=kernel[1], KW=kernel[2],
                CT=causal[0], CH=causal[1], CW=causal[2], PRECISION="ieee" if dtype == torch.float32 else "tf32")


def _launch_kwargs(config: TileConfig, kernel: Triple, causal: tuple[bool, bool, bool], d: int,
                   dtype: torch.dtype) -> dict:
    """Every constexpr and launch setting of a direct launch of `config` (built once per key)."""
    tile = {**config.kwargs(), "KW": kernel[2]}
    return {**_meta(kernel, causal, d, dtype), **config.kwargs(), "RW": _rw(tile), "RHE": _rhe(tile),
            "num_warps": config.num_warps, "num_stages": config.num_stages}


def _grid(t: int, h: int, w: int, tt: int, th: int, tw: int, bh_count: int) -> tuple[int, int]:
    return (triton.cdiv(t, tt) * triton.cdiv(h, th) * triton.cdiv(w, tw), bh_count)


def useful_flops(shape: tuple[int, ...], kernel: tuple[int, int, int]) -> int:
    """4 * tokens * heads * window * head_dim: QK and PV over each query's own window."""
    b, t, h, w, heads, d = shape
    return 4 * b * t * h * w * heads * math.prod(kernel) * d
