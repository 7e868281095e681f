"""Requirement and compatibility rules, and `decide(profile, capability)`.

`RULES` is the one place a requirement is written: each rule has a stable id, a check
over `Facts`, a message naming what is missing and a remedy. `decide()` walks the
options and returns one `Decision` per option key, with the chain of steps that led
from the requested value to the effective one.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from backends.machine.capability import GPU, Availability, Capability, arch_runs_on
from backends.machine.tuned import Tuned
from backends.config.ltx2_shapes import DIT_HEADS, RunShapes
from backends.config.run_length import RunLength, auto_choice, length_of
from backends.config.values import LOADER, NOBODY, VALUES, value
from backends.config.options import (
    OPTIONS_BY_KEY,
    Attention,
    CompileEnabled,
    CompileMode,
    DiffVAEMode,
    Dynamic,
    NABackend,
    NattenKernel,
    OffloadMode,
    Profile,
    Quantization,
    SparseAttention,
    show_value,
)


class Status(str, enum.Enum):
    OK = "ok"
    FALLBACK = "fallback"
    WARNING = "warning"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Step:
    value: Any
    reason: str

    @property
    def text(self) -> str:
        """'value: reason', or the reason alone for a step to no value (an option left unused)."""
        return self.reason if self.value is None else f"{show_value(self.value)}: {self.reason}"


@dataclass(frozen=True)
class Decision:
    option: str
    requested: Any
    effective: Any
    status: Status
    chain: tuple[Step, ...]
    rules: tuple[str, ...] = ()
    message: str | None = None
    remedy: str | None = None

    @property
    def effective_text(self) -> str:
        """The effective value as shown: 'cannot run' for an error with none, 'unused' otherwise."""
        if self.effective is not None:
            return show_value(self.effective)
        return "cannot run" if self.status is Status.ERROR else "unused"


@dataclass(frozen=True)
class Facts:
    """What the rules look at: the capability, the profile, and the attention shape asked about."""

    cap: Capability
    profile: Profile = field(default_factory=Profile)
    dtype: str = "bf16"
    head_dim: int = 64
    tuned: Tuned | None = None  # what `ltx-tui --tune` measured here: `auto` follows it
    run: RunShapes | None = None  # the run's shapes, when one is given (`--resolution/--frames`)
    length: RunLength | None = None  # the run's length (compile's cost counted over it); default: the tune's

    @property
    def used(self) -> tuple[int, ...]:
        """The CUDA ordinals the run uses (`Parallel.ordinals`)."""
        return self.profile.parallel.ordinals

    @property
    def used_gpus(self) -> list[GPU]:
        """The GPUs of `used` this capability knows."""
        by_index = {g.index: g for g in self.cap.gpus}
        return [by_index[i] for i in self.used if i in by_index]

    @property
    def multi(self) -> bool:
        return self.profile.parallel.gpus > 1

    @property
    def gpu(self) -> GPU | None:
        devices = self.profile.parallel.devices
        want = devices[0] if devices else 0
        gpus = self.cap.gpus
        return gpus[want] if want < len(gpus) else (gpus[0] if gpus else None)

    @property
    def cuda(self) -> bool:
        return self.cap.cuda

    @property
    def sm(self) -> tuple[int, int] | None:
        """The GPU's compute capability; (0, 0) when the capability does not know it."""
        return (self.gpu.compute_capability or (0, 0)) if self.cuda and self.gpu else None

    @property
    def sm_text(self) -> str:
        if not self.cuda:
            return "no CUDA device"
        return f"{self.gpu.name}, {self.gpu.sm}"

    def has(self, package: str) -> bool:
        return self.cap.package(package).available

    def why_not(self, package: str) -> str:
        return self.cap.package(package).reason or "unavailable"

    def ltx_part(self, part: str) -> bool:
        return self.has("ltx_kernels") and bool(self.cap.package("ltx_kernels").details.get(part))

    @property
    def no_cuda_reason(self) -> str:
        t = self.cap.torch
        return t.cuda_reason or self.cap.nvml.reason or t.reason or "no CUDA device visible"


@dataclass(frozen=True)
class Rule:
    id: str
    check: Callable[[Facts], bool]
    message: Callable[[Facts], str]
    remedy: str | Callable[[Facts], str]

    def holds(self, f: Facts) -> bool:
        return bool(self.check(f))

    def fix(self, f: Facts) -> str:
        """The remedy, in the words that fit these facts."""
        return self.remedy(f) if callable(self.remedy) else self.remedy


# --- NATTEN kernels (the facts of NATTEN 0.21.7) ------------------------------------------

@dataclass(frozen=True)
class NattenKernelReq:
    needs_libnatten: bool
    sm: Callable[[tuple[int, int]], bool]
    sm_text: str
    dtypes: tuple[str, ...]
    head_dim: Callable[[int], bool]
    head_dim_text: str
    cpu: bool = False
    bf16_min_sm: tuple[int, int] | None = None


NATTEN_KERNELS: dict[NattenKernel, NattenKernelReq] = {
    NattenKernel.BLACKWELL: NattenKernelReq(True, lambda s: s in ((10, 0), (10, 3)), "SM 10.0/10.3",
                                            ("fp16", "bf16"), lambda d: d <= 128 and d % 8 == 0,
                                            "head_dim <= 128 and a multiple of 8"),
    NattenKernel.HOPPER: NattenKernelReq(True, lambda s: s == (9, 0), "SM 9.0", ("fp16", "bf16"),
                                         lambda d: d in (32, 64, 128, 256), "head_dim 32/64/128/256"),
    NattenKernel.CUTLASS: NattenKernelReq(True, lambda s: s >= (6, 0), "SM >= 6.0", ("fp32", "fp16", "bf16"),
                                          lambda d: d % 8 == 0, "head_dim a multiple of 8",
                                          bf16_min_sm=(8, 0)),
    NattenKernel.FLEX: NattenKernelReq(False, lambda s: s >= (7, 0), "SM >= 7.0 or the CPU",
                                       ("fp32", "fp16", "bf16"), lambda d: d > 0 and d & (d - 1) == 0,
                                       "head_dim a power of 2", cpu=True),
}
NATTEN_AUTO_ORDER = (NattenKernel.BLACKWELL, NattenKernel.HOPPER, NattenKernel.CUTLASS, NattenKernel.FLEX)


def _cudnn_fp8_missing(f: Facts) -> list[str]:
    """What sdpa_cudnn_fp8 lacks here, in words (empty: nothing)."""
    missing = []
    if not (f.cuda and f.sm == (9, 0)):
        missing.append(f"SM 9.0, its Hopper engine (here: {f.sm_text})")
    if not f.has("cudnn_frontend"):
        missing.append(f"the cuDNN frontend ({f.why_not('cudnn_frontend')})")
    sdpa = f.cap.sdpa.get("cudnn", Availability(False, "not probed"))
    if f.cuda and not sdpa.available:
        missing.append(f"SDPA's cuDNN backend, for the calls it leaves in bf16 ({sdpa.reason})")
    return missing


def natten_kernel_check(kernel: NattenKernel, f: Facts) -> Availability:
    """Whether NATTEN kernel `kernel` runs `f.dtype`/`f.head_dim` here, and why not."""
    if not f.has("natten"):
        return Availability(False, f"natten is not importable ({f.why_not('natten')})")
    req = NATTEN_KERNELS[kernel]
    if req.needs_libnatten and not f.cap.package("natten").details.get("has_libnatten"):
        return Availability(False, "natten has no libnatten (CUDA kernels not built; PyPI ships only the sdist)")
    if f.cuda:
        if not req.sm(f.sm):
            return Availability(False, f"needs {req.sm_text}; this GPU is {f.gpu.sm}")
        if f.dtype == "bf16" and req.bf16_min_sm and f.sm < req.bf16_min_sm:
            return Availability(False, f"bf16 needs SM >= {req.bf16_min_sm[0]}.{req.bf16_min_sm[1]}")
    elif not req.cpu:
        return Availability(False, f"needs a CUDA device ({req.sm_text}): {f.no_cuda_reason}")
    if f.dtype not in req.dtypes:
        return Availability(False, f"dtype {f.dtype} not supported (only {'/'.join(req.dtypes)})")
    if not req.head_dim(f.head_dim):
        return Availability(False, f"head_dim {f.head_dim} not supported (needs {req.head_dim_text})")
    return Availability(True)


def natten_kernels(cap: Capability, dtype: str = "bf16", head_dim: int = 64) -> dict[str, Availability]:
    f = Facts(cap, dtype=dtype, head_dim=head_dim)
    return {k.value: natten_kernel_check(k, f) for k in NATTEN_AUTO_ORDER}


def _natten_candidates(f: Facts) -> tuple[NattenKernel, ...]:
    """The NATTEN kernels the profile allows; for `auto` the fastest measured here first, then
    NATTEN's own order."""
    kernel = f.profile.diffvae.natten_kernel
    if kernel is not NattenKernel.AUTO:
        return (kernel,)
    return _measured_first(f, "diffvae.na_backend", NATTEN_AUTO_ORDER, lambda k: f"natten:{k.value}")


def _measured_first(f: Facts, option: str, order: tuple, value_of=lambda v: v.value) -> tuple:
    """`order` with the values `--tune` measured for `option` here moved to the front, fastest
    first (a value measured inaccurate or failing is not moved)."""
    if f.tuned is None:
        return tuple(order)
    rank = {c.value: i for i, c in enumerate(f.tuned.ranked(option))}
    return tuple(sorted(order, key=lambda v: rank.get(value_of(v), len(rank))))


def _tuned_reason(f: Facts, option: str, value: str) -> str | None:
    """Why `value` was picked, when it is the fastest of `option` measured here."""
    ranked = f.tuned.ranked(option) if f.tuned else []
    return f.tuned.why(option, value) if ranked and ranked[0].value == value else None


def _natten_usable(f: Facts) -> bool:
    return any(natten_kernel_check(k, f).available for k in _natten_candidates(f))


def _natten_why(f: Facts) -> str:
    if not f.has("natten"):
        return f"natten is not importable ({f.why_not('natten')})"
    return "; ".join(f"{k.value}: {natten_kernel_check(k, f).reason}" for k in _natten_candidates(f))


# --- The NA backend order (the one place `auto` is decided) ---------------------------------

NA_FALLBACK_ORDER = (NABackend.NATTEN, NABackend.TRITON, NABackend.EAGER_SDPA)  # LTX-2's own order
NA_RULE = {b: value("diffvae.na_backend", b).needs[0] for b in NA_FALLBACK_ORDER if value("diffvae.na_backend", b).needs}


def na_auto_order(f: Facts) -> tuple[tuple[NABackend, ...], str]:
    """The order `auto` tries NA backends in here, and why: the fastest measured here first when
    `ltx-tui --tune` measured this machine (`Facts.tuned`), else this prior.

    On SM 9.0 ltx-tui's Triton kernel comes first: 4.5x-5.3x lower time / yardstick than LTX-2's
    Triton fallback and 3.9x-4.8x lower than NATTEN hopper-fna's anchored ratios at the DiffVAE
    shapes (bench/na3d.py on an H200; bench/RESULTS.md). Elsewhere on CUDA NATTEN's CUDA kernels
    come first (not measured against ours), then Triton, then eager SDPA. On the CPU tiled eager
    SDPA comes first: in `ltx-tui --tune` at 224x224x9 on the 2-core dev machine NATTEN's flex-fna
    gave no answer in 60.9 s, over 5x eager SDPA's 12.2 s (bench/RESULTS.md, "ltx-tui --tune —
    CPU dev machine").
    """
    if f.cuda and f.sm == (9, 0):
        order, why = (NABackend.TRITON, NABackend.NATTEN, NABackend.EAGER_SDPA), \
            "prior: on SM 9.0 ltx-tui's Triton NA measured fastest"
    elif f.cuda:
        order, why = NA_FALLBACK_ORDER, "prior: NATTEN's CUDA kernels first off SM 9.0"
    else:
        order, why = (NABackend.EAGER_SDPA, NABackend.NATTEN), "no CUDA device: tiled eager SDPA is fastest on the CPU"
    ranked = f.tuned.ranked("diffvae.na_backend") if f.tuned else []
    if not ranked:
        return order, why
    family = [NABackend(c.value.split(":")[0]) for c in ranked]
    order = tuple(dict.fromkeys(family + [b for b in order if b not in family]))
    return order, f.tuned.why("diffvae.na_backend", ranked[0].value)


def na_usable(backend: NABackend, f: Facts, *, for_auto: bool = False) -> Availability:
    """Whether NA `backend` runs here. For `auto`, NATTEN counts on CUDA only with a fused kernel
    (its flex-fna materialises every score: 100x+ slower at DiffVAE shapes)."""
    if backend is NABackend.NATTEN:
        if not _natten_usable(f):
            return Availability(False, _natten_why(f))
        if for_auto and f.cuda and not any(natten_kernel_check(k, f).available
                                           for k in _natten_candidates(f) if k is not NattenKernel.FLEX):
            return Availability(False, "only NATTEN's flex-fna runs here, which auto skips on CUDA (100x+ slower)")
        return Availability(True)
    if backend is NABackend.TRITON:
        ok = RULES["triton.na"].holds(f)
        return Availability(ok, None if ok else RULES["triton.na"].message(f))
    return Availability(True)


def na_auto_choice(f: Facts, usable_here: Callable[[NABackend], Availability] | None = None
                   ) -> tuple[NABackend | None, list[Step], tuple[NABackend, ...]]:
    """What `auto` means here (the one place it is decided), with the chain of what it tried and the order:
    the first backend of `na_auto_order` that runs (and that `usable_here` allows: the runtime
    adds what the tensors at hand need)."""
    order, why_first = na_auto_order(f)
    chain: list[Step] = []
    for backend in order:
        usable = na_usable(backend, f, for_auto=True)
        if usable.available and usable_here is not None:
            usable = usable_here(backend)
        if not usable.available:
            chain.append(Step(backend.value, usable.reason))
            continue
        chain.append(Step(backend.value, f"auto ({why_first}): {value('diffvae.na_backend', backend).text}"))
        return backend, chain, order
    return None, chain, order


# --- auto for the options whose first call compiles (decided in `run_length.auto_choice`) ----

def diffvae_auto(f: Facts) -> tuple[DiffVAEMode, str]:
    """The layout `diffvae.mode = auto` runs here, and why (never blackwell_dsl: its own kernels; never
    combined_compile without natten: LTX-2's own pipeline raises for it, so its flags could not carry it)."""
    mode, why = auto_choice("diffvae.mode", f.tuned, length_of(f.tuned, f.length),
                            lambda v: v != "auto" and not value("diffvae.mode", v).needs
                            and (v != DiffVAEMode.COMBINED_COMPILE.value or _natten_usable(f)), f.cuda)
    return DiffVAEMode(mode), why


def compiles(f: Facts) -> tuple[bool, str | None]:
    """Whether the DiT's blocks are compiled here, and why when `compile.enabled = auto` decided it."""
    asked = f.profile.compile.enabled
    if asked is not CompileEnabled.AUTO:
        return asked is CompileEnabled.TRUE, None
    # never compiled under sequence parallelism by auto: LTX-2's own *_mgpu CLI would trap in its all2all
    # barrier on the first compiled step (rule parallel.compile-barrier; asked for, `ltx-tui run` copes)
    enabled, why = auto_choice("compile.enabled", f.tuned, length_of(f.tuned, f.length),
                               lambda v: v == "false" or not f.multi, f.cuda)
    return enabled == "true", why


# --- The rules table ------------------------------------------------------------------------

def _sm_at_least(f: Facts, sm: tuple[int, int]) -> bool:
    return f.cuda and f.sm >= sm


# --- Multi-GPU (LTX-2 v1.2.0's sequence parallelism), decided before any weights load -------------

# ltx-kernels' all2all connects at most 8 GPUs: its CUDA sources size their peer tables by
# MAX_NUM_PEERS = 8 (csrc/include/cuda/configs.cuh).
MAX_SP_GPUS = 8
# The SP token cap: ltx-pipelines' *_mgpu runners size the all2all buffers for `sp_max_tokens` video
# tokens, 32,768 by default (`_DEFAULT_SP_MAX_TOKENS` in distilled_mgpu.py and the ti2vid *_mgpu
# modules), an argument of the runner's setup in the Python API, no command-line flag. ltx-core's
# SequenceParallelModelWrapper pads the video tokens to a multiple of the world size and raises
# above the cap (ltx_core/multigpu/transformer/sequence_parallel.py); the all2all buffers hold
# ceil(cap / world size) tokens a rank for the whole batch (AttentionManager in
# ltx_core/multigpu/transformer/attention.py; the size check in ltx-kernels' csrc/all2all/all2all.cpp).
SP_MAX_TOKENS = 32_768
# ltx-kernels' all2all barrier timeout: DEFAULT_BARRIER_TIMEOUT_SECONDS = 10.0 (configs.cuh). A
# rank compiling its first step can hold the others in the barrier past it. ltx-kernels'
# All2All.set_timeout_seconds (ltx_kernels/all_to_all.py), reached through ltx-core's
# AttentionManager.all2all_timeout_seconds and ltx-pipelines' SequenceParallelBuilder
# .all2all_timeout_seconds, can raise it; LTX-2 v1.2.0 never calls them.
ALL2ALL_BARRIER_SECONDS = 10.0
ALLOWED_SP_GPUS = tuple(n for n in range(1, MAX_SP_GPUS + 1) if DIT_HEADS % n == 0)  # 1, 2, 4, 8
# LTX-2's multi-GPU path is one node: its fleet starts one process per local GPU with
# MASTER_ADDR 127.0.0.1 (ltx_pipelines/multigpu/fleet.py, controller.py).
SINGLE_NODE = "LTX-2's multi-GPU path runs on one node only (one process per local GPU, its controller binds " \
    "127.0.0.1): multi-node is not supported"


def sp_tokens(run: RunShapes, gpus: int) -> int:
    """The video tokens sequence parallelism carries for `run`: the DiT's tokens padded to a
    multiple of the world size, times the batch (the all2all buffers hold the whole batch)."""
    return run.batch * (run.dit_tokens + (-run.dit_tokens) % gpus)


def sp_token_cap(gpus: int) -> int:
    """The tokens the all2all buffers hold over `gpus` ranks: ceil(cap / gpus) each."""
    return -(-SP_MAX_TOKENS // gpus) * gpus


def _all2all_archs(f: Facts) -> list[str] | None:
    archs = f.cap.package("ltx_kernels").details.get("all2all_archs")
    return list(archs) if isinstance(archs, (list, tuple)) and archs else None


def _all2all_arch_misses(f: Facts) -> list[GPU]:
    """Used GPUs the all2all build has no code for (none when its architectures are unknown)."""
    archs = _all2all_archs(f)
    if not f.multi or not f.ltx_part("all2all") or archs is None:
        return []
    return [g for g in f.used_gpus if g.compute_capability and not arch_runs_on(archs, g.compute_capability)]


def _all2all_unverified(f: Facts) -> bool:
    return f.multi and f.ltx_part("all2all") and _all2all_archs(f) is None


def _peer_pairs(f: Facts, want: bool | None) -> list[tuple[int, int]]:
    """Pairs of the used GPUs (that exist) whose peer access is `want` (either direction)."""
    used = [g.index for g in f.used_gpus]
    pairs = []
    for n, i in enumerate(used):
        for j in used[n + 1:]:
            both = (f.cap.peer_access.between(i, j), f.cap.peer_access.between(j, i))
            if (want is None and None in both and False not in both) or (want is False and False in both):
                pairs.append((i, j))
    return pairs


def _pairs_text(pairs: list[tuple[int, int]]) -> str:
    shown = ", ".join(f"{i}-{j}" for i, j in pairs[:8])
    return shown + (f" and {len(pairs) - 8} more" if len(pairs) > 8 else "")


def _all2all_message(f: Facts) -> str:
    details = f.cap.package("ltx_kernels").details
    if not f.has("ltx_kernels"):
        return f"sequence parallel needs ltx-kernels' all2all: ltx_kernels is not importable ({f.why_not('ltx_kernels')})"
    return ("sequence parallel needs ltx-kernels' all2all: " + str(details.get("all2all_note")
            or "ltx_kernels has no all2all build"))


def mgpu_drops(profile: Profile, option: str | None = None) -> list[str]:
    """What LTX-2's *_mgpu command lines would silently run instead of `profile` (`option`: only
    about it): the plan's rule and `ltx-tui run` on a *_mgpu module say it in these words."""
    q, o = profile.transformer.quantization, profile.offload.mode
    said = []
    if q is not Quantization.FP8_CAST and option in (None, "transformer.quantization"):
        said.append(f"--quantization: every worker builds the DiT with fp8-cast, so transformer.quantization = {q} "
                    "would silently run fp8-cast")
    if o is not OffloadMode.NONE and option in (None, "offload.mode"):
        said.append(f"--offload: every rank keeps all 48 DiT blocks resident, so offload.mode = {o} would silently "
                    "stream nothing")
    return said


def _mgpu_dropped(f: Facts, option: str | None = None) -> str:
    return "LTX-2's multi-GPU command lines (*_mgpu) drop " + "; and ".join(mgpu_drops(f.profile, option))


CUDA_GRAPH_MODES = tuple(m for m in CompileMode if value("compile.mode", m).cuda_graphs)
LTX2_QUANT_FLAGS = tuple(q for q in Quantization if value("transformer.quantization", q).flag)
OFFLOAD_QUANTIZATIONS = (Quantization.NONE, Quantization.FP8_CAST)  # what LTX-2's block streaming loads
DSL_SMS = ((10, 0), (10, 1), (10, 3))

_RULES: tuple[Rule, ...] = (
    Rule("cuda.device", lambda f: f.cuda,
         lambda f: f"needs a CUDA device: {f.no_cuda_reason}",
         "run on a machine with an NVIDIA GPU and a CUDA build of torch, or choose a CPU path"),
    Rule("natten.usable", _natten_usable, _natten_why,
         "install natten with its CUDA kernels (pip install natten builds from source, ~20 min), "
         "or choose another diffvae.na_backend / natten_kernel"),
    Rule("natten.flex-slow", lambda f: not f.cuda,
         lambda f: "only NATTEN's flex-fna runs here: at DiffVAE shapes it is 100x+ slower than hopper-fna",
         "build natten with CUDA (libnatten), or use diffvae.na_backend = \"triton\""),
    Rule("triton.na", lambda f: f.cuda and f.has("triton"),
         lambda f: ("triton is not importable (" + f.why_not("triton") + ")") if f.cuda
         else f"the Triton NA kernel needs a CUDA device: {f.no_cuda_reason}",
         "pip install triton on a CUDA machine, or use diffvae.na_backend = \"eager_sdpa\""),
    Rule("diffvae.compile-off",
         lambda f: f.profile.diffvae.mode is not DiffVAEMode.CHUNKED_COMPILE or _natten_usable(f),
         lambda f: "ltx-tui's runtime keeps it compiled (its NA is a torch custom op), but LTX-2's own pipeline "
         "turns torch.compile off for the DiffVAE when natten cannot run (" + _natten_why(f) + ")",
         "apply the profile with ltx-tui's runtime, or install natten with CUDA kernels for LTX-2's pipeline"),
    Rule("diffvae.combined-needs-natten",
         lambda f: f.profile.diffvae.mode is not DiffVAEMode.COMBINED_COMPILE or _natten_usable(f),
         lambda f: "ltx-tui's runtime runs it on any NA backend, but LTX-2's own pipeline raises for "
         "combined_compile without natten (" + _natten_why(f) + ")",
         "apply the profile with ltx-tui's runtime, or install natten with CUDA kernels for LTX-2's pipeline"),
    Rule("diffvae.blackwell-dsl",
         lambda f: f.cuda and f.sm in DSL_SMS and f.ltx_part("vae") and f.has("cutlass_dsl"),
         lambda f: "blackwell_dsl needs SM 10.0/10.1/10.3 (here: " + f.sm_text + "), ltx_kernels.vae ("
         + ("present" if f.ltx_part("vae") else "missing") + ") and cutlass.cute from nvidia-cutlass-dsl ("
         + ("present" if f.has("cutlass_dsl") else "missing") + ")",
         "use a B200/GB200-class GPU with ltx-kernels and nvidia-cutlass-dsl, or diffvae.mode = \"chunked_eager\""),
    Rule("diffvae.dsl-pair",
         lambda f: (f.profile.diffvae.na_backend is NABackend.BLACKWELL_DSL)
         == (f.profile.diffvae.mode is DiffVAEMode.BLACKWELL_DSL)
         or (f.profile.diffvae.mode is DiffVAEMode.BLACKWELL_DSL and f.profile.diffvae.na_backend is NABackend.AUTO),
         lambda f: "diffvae.mode blackwell_dsl and diffvae.na_backend blackwell_dsl go together "
         f"(here: mode {f.profile.diffvae.mode}, na_backend {f.profile.diffvae.na_backend})",
         "set both to blackwell_dsl, or neither (na_backend = \"auto\" works with every mode)"),
    Rule("attention.fa3", lambda f: f.cuda and f.sm[0] == 9 and f.has("flash_attn_3"),
         lambda f: f"FlashAttention 3 needs SM 9.x (here: {f.sm_text}) and flash_attn_interface "
         f"({'present' if f.has('flash_attn_3') else f.why_not('flash_attn_3')})",
         "on Hopper, install FlashAttention 3 (hopper/ of flash-attention); else transformer.attention = \"automatic\""),
    Rule("attention.fa4", lambda f: f.cuda and f.sm[0] in (9, 10) and f.has("flash_attn_4"),
         lambda f: f"FlashAttention 4 needs SM 9.x/10.x (here: {f.sm_text}) and flash_attn.cute "
         f"({'present' if f.has('flash_attn_4') else f.why_not('flash_attn_4')})",
         "install flash-attn with its cute (FA4) module on Hopper/Blackwell; else \"automatic\""),
    *(Rule(f"attention.sdpa_{n}", (lambda n: lambda f: f.cuda and f.cap.sdpa.get(n, Availability(False)).available)(n),
           (lambda n: lambda f: f"SDPA {n} backend unavailable: "
            + (f.cap.sdpa.get(n, Availability(False, "not probed")).reason or "") if f.cuda
            else f"SDPA {n} backend needs a CUDA device: {f.no_cuda_reason}")(n),
           "choose transformer.attention = \"automatic\" to take the best SDPA backend that works")
      for n in ("cudnn", "flash", "efficient")),
    Rule("attention.cudnn_fp8", lambda f: not _cudnn_fp8_missing(f),
         lambda f: "cuDNN's fp8 attention needs " + "; ".join(_cudnn_fp8_missing(f)),
         "on an H100/H200, pip install nvidia-cudnn-frontend; else transformer.attention = \"sdpa_cudnn\""),
    Rule("attention.mps", lambda f: f.cap.platform == "darwin",
         lambda f: f"mps_sdpa runs on macOS only (here: {f.cap.platform})",
         "use \"automatic\" or \"pytorch\" off macOS"),
    Rule("quant.fp8-scaled-mm", lambda f: _sm_at_least(f, (8, 9)),
         lambda f: f"fp8-scaled-mm uses torch._scaled_mm, which needs SM >= 8.9 (here: {f.sm_text})",
         "use quantization = \"fp8-cast\" (runs anywhere), or an Ada/Hopper/Blackwell GPU"),
    Rule("quant.nvfp4", lambda f: f.cuda and f.sm[0] >= 10 and f.ltx_part("nvfp4"),
         lambda f: f"nvfp4 needs SM major >= 10 (here: {f.sm_text}) and ltx-kernels' nvfp4 build ("
         + ("present" if f.ltx_part("nvfp4") else "missing") + ")",
         "use fp8-cast / fp8-scaled-mm, or a Blackwell GPU with ltx-kernels built with nvfp4"),
    Rule("quant.runs", lambda f: value("transformer.quantization", f.profile.transformer.quantization).runner != NOBODY,
         lambda f: f"ltx-tui does not run {f.profile.transformer.quantization}: "
         + value("transformer.quantization", f.profile.transformer.quantization).text,
         "use fp8-scaled-mm (row-wise FP8 scales, SM >= 8.9) or fp8-cast"),
    Rule("quant.loader-only",
         lambda f: value("transformer.quantization", f.profile.transformer.quantization).runner != LOADER,
         lambda f: f"only LTX-2's loader applies {f.profile.transformer.quantization} (while it builds the DiT): "
         f"`ltx-tui run` passes --quantization {f.profile.transformer.quantization} to LTX-2; apply_profile on a "
         "built model refuses it before changing anything",
         "run through `ltx-tui run` or LTX-2's own CLI; to quantize a built model use fp8-scaled-mm"),
    Rule("quant.fp8-blockwise",
         lambda f: f.cuda and (f.sm in ((8, 9), (9, 0)) or f.sm[0] in (10, 12)) and f.has("ltx_kernels"),
         lambda f: f"fp8-blockwise needs ltx-kernels ({'present' if f.has('ltx_kernels') else 'missing'}) "
         f"and SM 8.9/9.0/10.x/12.x (here: {f.sm_text}; Ampere fails)",
         "install ltx-kernels on an Ada/Hopper/Blackwell GPU, or use fp8-cast"),
    Rule("quant.int8-w8a8", lambda f: _sm_at_least(f, (8, 0)) and f.has("triton"),
         lambda f: f"int8-w8a8 needs int8 tensor cores (SM >= 8.0; here: {f.sm_text}) and triton for "
         f"ltx-tui's int8 GEMM ({'present' if f.has('triton') else f.why_not('triton')})",
         "use an Ampere or newer GPU with triton installed, or fp8-cast"),
    Rule("sparse.runs",
         lambda f: value("transformer.sparse_attention", f.profile.transformer.sparse_attention).runner != NOBODY,
         lambda f: f"nothing here runs sparse_attention = {f.profile.transformer.sparse_attention}: it is "
         "TurboDiffusion's; neither LTX-2 v1.2.0's pipelines nor ltx-tui's runtime install it",
         "set transformer.sparse_attention = \"none\" for LTX-2 (keep it only in profiles for TurboDiffusion's own "
         "scripts)"),
    Rule("sparse.sla", lambda f: f.cuda and f.has("triton") and f.has("turbo_diffusion_ops"),
         lambda f: f"sla needs CUDA ({'yes' if f.cuda else f.no_cuda_reason}), triton "
         f"({'present' if f.has('triton') else 'missing'}) and TurboDiffusion's turbo_diffusion_ops "
         f"({'present' if f.has('turbo_diffusion_ops') else f.why_not('turbo_diffusion_ops')})",
         "install TurboDiffusion (with its built turbo_diffusion_ops), or sparse_attention = \"none\""),
    Rule("sparse.sagesla",
         lambda f: f.cuda and f.has("spas_sage_attn") and f.has("turbo_diffusion_ops") and f.head_dim in (64, 128),
         lambda f: f"sagesla needs CUDA ({'yes' if f.cuda else f.no_cuda_reason}), SpargeAttn's spas_sage_attn "
         f"({'present' if f.has('spas_sage_attn') else f.why_not('spas_sage_attn')}), turbo_diffusion_ops "
         f"({'present' if f.has('turbo_diffusion_ops') else f.why_not('turbo_diffusion_ops')}) and head_dim 64/128",
         "install SpargeAttn and TurboDiffusion, or use sparse_attention = \"sla\" / \"none\""),
    Rule("compile.cuda-graphs-cuda", lambda f: f.cuda,
         lambda f: f"CUDA graphs (a compile mode with them, or capture) need a CUDA device: {f.no_cuda_reason}",
         "use compile.mode = \"default\" and capture = false"),
    Rule("compile.cuda-graphs-single-gpu",
         lambda f: f.profile.parallel.gpus > 1 or f.profile.offload.mode is not OffloadMode.NONE,
         lambda f: "ltx-tui's runtime captures CUDA graphs over resident weights, but LTX-2's own single-GPU "
         "builder does not keep resident weights and raises for CUDA graphs with offload none",
         "apply the profile with ltx-tui's runtime; for LTX-2's pipeline use compile.mode = \"default\" or "
         "\"max-autotune-no-cudagraphs\" with capture = false"),
    Rule("compile.cuda-graphs-streamed",
         lambda f: f.profile.offload.mode is OffloadMode.NONE or f.profile.parallel.gpus > 1
         or not (f.profile.compile.mode in CUDA_GRAPH_MODES or f.profile.compile.capture),
         lambda f: f"ltx-tui's runtime streams offloaded weights ({f.profile.offload.mode}) through shared GPU slots, "
         "which CUDA graphs cannot follow: it runs those blocks without CUDA graphs",
         "set offload.mode = \"none\" to keep CUDA graphs, or a compile.mode without CUDA graphs and "
         "compile.capture = false to say so"),
    Rule("compile.inductor-triton", lambda f: not f.cuda or f.has("triton"),
         lambda f: f"the inductor backend generates Triton kernels on CUDA, but triton is not importable "
         f"({f.why_not('triton')})",
         "pip install triton, or compile.backend = \"aot_eager\""),
    Rule("compile.dynamic", lambda f: f.profile.compile.dynamic is not Dynamic.TRUE,
         lambda f: "dynamic=true: the pipelines call .item() on data (data-dependent shapes), expect graph breaks",
         "leave compile.dynamic = \"auto\" unless you know the shapes vary"),
    Rule("offload.loader-quantization",
         lambda f: f.profile.offload.mode is OffloadMode.NONE
         or value("transformer.quantization", f.profile.transformer.quantization).runner != LOADER,
         lambda f: f"offload.mode = {f.profile.offload.mode} with transformer.quantization = "
         f"{f.profile.transformer.quantization}: only LTX-2's loader applies that quantization, and LTX-2's "
         "streaming builder takes only none or fp8-cast (ltx-tui's runtime streams, but cannot apply it): nothing "
         "runs both",
         "use transformer.quantization = \"fp8-cast\" with offload, or offload.mode = \"none\""),
    Rule("offload.quantization",
         lambda f: f.profile.transformer.quantization in OFFLOAD_QUANTIZATIONS
         or f.profile.transformer.quantization not in LTX2_QUANT_FLAGS,
         lambda f: f"ltx-tui's runtime streams {f.profile.transformer.quantization} weights, but LTX-2's own "
         f"pipeline raises for --offload {f.profile.offload.mode} with --quantization "
         f"{f.profile.transformer.quantization} (only none or fp8-cast)",
         "apply the profile with ltx-tui's runtime; for LTX-2's pipeline use transformer.quantization = "
         "\"fp8-cast\" or offload.mode = \"none\""),
    Rule("parallel.gpu-count", lambda f: f.profile.parallel.gpus <= len(f.cap.gpus) and (f.cuda or not f.cap.gpus),
         lambda f: f"parallel.gpus = {f.profile.parallel.gpus} but {len(f.cap.gpus) if f.cuda else 0} "
         f"CUDA GPU(s) are visible" + ("" if f.cuda else f" ({f.no_cuda_reason})")
         + (f"; {SINGLE_NODE}" if f.multi and f.cuda else ""),
         lambda f: (f"run on a machine with {'an NVIDIA GPU' if f.profile.parallel.gpus == 1 else 'NVIDIA GPUs'} "
                    "and a CUDA build of torch (check the driver and CUDA_VISIBLE_DEVICES)")
         if f.profile.parallel.gpus == 1 or not (f.cuda and f.cap.gpus) else
         f"lower parallel.gpus to the {len(f.cap.gpus)} visible (GPUs of one node), or check "
         "CUDA_VISIBLE_DEVICES and the driver"),
    Rule("parallel.devices",
         lambda f: all(d < len(f.cap.gpus) for d in (f.profile.parallel.devices or ())),
         lambda f: f"parallel.devices {list(f.profile.parallel.devices or ())} names ordinals beyond the "
         f"{len(f.cap.gpus)} visible GPU(s)",
         "use ordinals 0.. visible-1 (after CUDA_VISIBLE_DEVICES), or drop parallel.devices"),
    Rule("parallel.heads", lambda f: DIT_HEADS % f.profile.parallel.gpus == 0,
         lambda f: f"sequence parallel splits the DiT's {DIT_HEADS} attention heads across the GPUs: "
         f"{f.profile.parallel.gpus} GPUs do not divide them (LTX-2 raises); "
         f"allowed: {', '.join(map(str, ALLOWED_SP_GPUS))}",
         "use parallel.gpus = 2, 4 or 8"),
    Rule("parallel.max-peers", lambda f: f.profile.parallel.gpus <= MAX_SP_GPUS,
         lambda f: f"ltx-kernels' all2all connects at most {MAX_SP_GPUS} GPUs (MAX_NUM_PEERS in its CUDA sources): "
         f"parallel.gpus = {f.profile.parallel.gpus} is more; allowed: {', '.join(map(str, ALLOWED_SP_GPUS))}",
         "use parallel.gpus = 2, 4 or 8"),
    Rule("parallel.linux", lambda f: not f.multi or f.cap.platform.startswith("linux"),
         lambda f: f"multi-GPU runs need Linux (here: {f.cap.platform})", "run multi-GPU on Linux"),
    Rule("parallel.nccl", lambda f: not f.multi or f.cap.torch.nccl,
         lambda f: "multi-GPU runs need NCCL (LTX-2's fleet is an NCCL process group), which this torch build lacks "
         "(torch.distributed.is_nccl_available() is false)",
         "install a CUDA build of torch with NCCL"),
    Rule("parallel.all2all", lambda f: not f.multi or f.ltx_part("all2all"), _all2all_message,
         "install ltx-kernels with its all2all extension built (its setup.py, or torch.utils.cpp_extension from "
         "csrc/all2all) for these GPUs"),
    Rule("parallel.all2all-arch", lambda f: not _all2all_arch_misses(f),
         lambda f: "ltx-kernels' all2all (" + str(f.cap.package("ltx_kernels").details.get("all2all_path")
                                                 or "all2all_cpp") + ") holds GPU code for "
         + ", ".join(_all2all_archs(f) or []) + " only: nothing that runs on "
         + ", ".join(sorted({f"{g.name} ({g.sm})" for g in _all2all_arch_misses(f)})),
         lambda f: "rebuild ltx-kernels' all2all on this box (or with TORCH_CUDA_ARCH_LIST naming "
         + ", ".join(sorted({f"{g.compute_capability[0]}.{g.compute_capability[1]}"
                             for g in _all2all_arch_misses(f)})) + ")"),
    Rule("parallel.all2all-unverified", lambda f: not _all2all_unverified(f),
         lambda f: "ltx-kernels' all2all imports, but which GPU architectures it was built for is not known ("
         + str(f.cap.package("ltx_kernels").details.get("all2all_note") or "not probed")
         + "): not verified that it runs on " + ", ".join(sorted({g.sm for g in f.used_gpus}) or ["these GPUs"]),
         "check with `cuobjdump --list-elf` on the all2all_cpp extension, or rebuild it on this box"),
    Rule("parallel.peer-access", lambda f: not f.multi or not _peer_pairs(f, False),
         lambda f: f"GPU pair(s) {_pairs_text(_peer_pairs(f, False))} have no peer access ("
         + (f.cap.peer_access.source or "?") + "): ltx-kernels' all2all maps each rank's buffer into the other "
         "ranks through CUDA IPC and writes to it directly",
         "use GPUs that reach each other (NVLink, or PCIe P2P: `nvidia-smi topo -p2p rw`) in parallel.devices; "
         "on PCIe check the IOMMU/ACS settings"),
    Rule("parallel.peer-access-unverified", lambda f: not f.multi or not _peer_pairs(f, None),
         lambda f: f"peer access of GPU pair(s) {_pairs_text(_peer_pairs(f, None))} is not known ("
         + (f.cap.peer_access.reason or "not probed") + "): ltx-kernels' all2all needs it between every pair",
         "probe this box live (`ltx-tui --check` on it), or check `nvidia-smi topo -p2p rw`"),
    Rule("parallel.sp-tokens",
         lambda f: not f.multi or f.run is None or sp_tokens(f.run, f.profile.parallel.gpus)
         <= sp_token_cap(f.profile.parallel.gpus),
         lambda f: f"the run ({f.run.label if f.run else '?'}) gives sequence parallelism "
         f"{sp_tokens(f.run, f.profile.parallel.gpus) if f.run else '?'} video tokens"
         + (f" (batch {f.run.batch} x {f.run.dit_tokens} padded to a multiple of {f.profile.parallel.gpus})"
            if f.run and f.run.batch > 1 else f" (padded to a multiple of {f.profile.parallel.gpus})")
         + f", over its cap of {SP_MAX_TOKENS} (sp_max_tokens, LTX-2's default; LTX-2 raises at the first step). "
         "Checked at the run's full resolution, where distilled_mgpu runs its DiT under sequence parallelism "
         "(the ti2vid *_mgpu modules do so in stage 1 only, at half the resolution)",
         f"lower --resolution / --frames / --batch to at most {SP_MAX_TOKENS} tokens (W/32 x H/32 x ((frames-1)/8+1)); "
         "sp_max_tokens is an argument of the *_mgpu runners' setup() in LTX-2's Python API, not a command-line flag"),
    Rule("parallel.ignores-quant-offload",
         lambda f: not f.multi or not mgpu_drops(f.profile),
         _mgpu_dropped,
         "multi-GPU profiles: set transformer.quantization = \"fp8-cast\" and offload.mode = \"none\" (what LTX-2's "
         "multi-GPU modules run), or parallel.gpus = 1 to keep them"),
    Rule("parallel.compile-barrier", lambda f: not f.multi or not compiles(f)[0],
         lambda f: "compiled under sequence parallelism: a rank still compiling its first step can keep the others "
         f"waiting in ltx-kernels' all2all barrier past its {ALL2ALL_BARRIER_SECONDS:g} s timeout, and the kernel "
         "traps; LTX-2 v1.2.0 has All2All.set_timeout_seconds (ltx_kernels.all_to_all; AttentionManager"
         ".all2all_timeout_seconds in ltx_core.multigpu.transformer.attention) but never raises it. `ltx-tui run` "
         "raises the barrier timeout in every rank before the first step",
         "run it through `ltx-tui run`; with LTX-2's own *_mgpu CLI set compile.enabled = false, or raise "
         "all2all_timeout_seconds through its Python API"),
)

RULES: dict[str, Rule] = {r.id: r for r in _RULES}


# --- Resolution ---------------------------------------------------------------------------

class _Resolver:
    def __init__(self, profile: Profile, cap: Capability, tuned: Tuned | None, run: RunShapes | None = None,
                 length: RunLength | None = None) -> None:
        self.p = profile
        self.f = Facts(cap, profile, tuned=tuned, run=run, length=length)
        self.out: dict[str, Decision] = {}

    # helpers -----------------------------------------------------------------------------
    def failing(self, ids: Iterable[str]) -> list[Rule]:
        return [RULES[i] for i in ids if not RULES[i].holds(self.f)]

    def put(self, key: str, effective: Any, status: Status, chain: Iterable[Step],
            rules: Iterable[str] = (), message: str | None = None, remedy: str | None = None) -> None:
        self.out[key] = Decision(key, _plain(self.p.get(key)), _plain(effective), status, tuple(chain),
                                 tuple(rules), message, remedy)

    def ok(self, key: str, reason: str, effective: Any = ..., rules: Iterable[str] = ()) -> None:
        value = self.p.get(key) if effective is ... else effective
        self.put(key, value, Status.OK, [Step(_plain(value), reason)], rules)

    def unused(self, key: str, reason: str) -> None:
        self.put(key, None, Status.OK, [Step(None, f"unused: {reason}")])

    def require(self, key: str, ids: Iterable[str], ok_reason: str) -> bool:
        """Ok if every rule holds, else an error with the first failing rule's message."""
        failed = self.failing(ids)
        if not failed:
            self.ok(key, ok_reason, rules=ids)
            return True
        rule = failed[0]
        self.put(key, None, Status.ERROR, [Step(_plain(self.p.get(key)), rule.message(self.f))],
                 [r.id for r in failed], rule.message(self.f), rule.fix(self.f))
        return False

    def mgpu_dropped(self, key: str) -> None:
        """An error: LTX-2's *_mgpu command lines drop the flag of `key` and run something else."""
        rule, message = RULES["parallel.ignores-quant-offload"], _mgpu_dropped(self.f, key)
        self.put(key, None, Status.ERROR, [Step(_plain(self.p.get(key)), message)], [rule.id], message,
                 rule.fix(self.f))

    def warn(self, key: str, rule_id: str, effective: Any = ..., reason: str | None = None) -> None:
        """A warning: `effective` (default: as requested) runs, and the rule says what to know."""
        rule = RULES[rule_id]
        value = self.p.get(key) if effective is ... else effective
        chain = [Step(_plain(self.p.get(key)), reason or "requested")] if effective is not ... or reason else []
        chain.append(Step(_plain(value), rule.message(self.f)))
        self.put(key, value, Status.WARNING, chain, [rule_id], rule.message(self.f), rule.fix(self.f))

    # options -----------------------------------------------------------------------------
    def diffvae(self) -> None:
        mode, req = self.p.diffvae.mode, self.p.diffvae.na_backend
        na_key = "diffvae.na_backend"
        if not RULES["diffvae.dsl-pair"].holds(self.f):
            self.require(na_key, ["diffvae.dsl-pair"], "")
        elif mode is DiffVAEMode.BLACKWELL_DSL:
            if self.require(na_key, ["diffvae.blackwell-dsl"], ""):
                self.ok(na_key, "Blackwell DSL kernels from ltx_kernels.vae", NABackend.BLACKWELL_DSL,
                        ["diffvae.blackwell-dsl"])
        else:
            self._na_chain(na_key, req)
        self._natten_kernel()
        self._mode()

    def _na_chain(self, key: str, req: NABackend) -> None:
        """`auto`: the first usable backend of `na_auto_order`; else the requested one, falling back
        natten -> triton -> eager_sdpa as LTX-2 does."""
        f = self.f
        if req is NABackend.AUTO:
            backend, chain, order = na_auto_choice(f)
            if backend is not None:
                self.put(key, backend, Status.OK, chain, [NA_RULE[b] for b in order if b in NA_RULE])
            else:
                self.put(key, None, Status.ERROR, chain, [], "no NA backend runs here", RULES["triton.na"].fix(self.f))
            return
        order = list(NA_FALLBACK_ORDER)
        chain, fired = [], []
        for backend in order[order.index(req):]:
            usable = na_usable(backend, f)
            if not usable.available:
                chain.append(Step(backend.value, usable.reason))
                fired.append(NA_RULE[backend])
                continue
            chain.append(Step(backend.value, value(key, backend).text))
            if not fired:
                self.put(key, backend, Status.OK, chain, [r for r in (NA_RULE.get(backend),) if r])
            else:
                first = RULES[fired[0]]
                self.put(key, backend, Status.FALLBACK, chain, fired,
                         f"{req} cannot run, fell back to {backend}: " + first.message(f), first.fix(f))
            return

    def _natten_kernel(self) -> None:
        key = "diffvae.natten_kernel"
        kernel = self.p.diffvae.natten_kernel
        na = self.out["diffvae.na_backend"].effective
        if na != NABackend.NATTEN.value:
            asked = self.p.diffvae.na_backend in (NABackend.AUTO, NABackend.NATTEN)
            check = natten_kernel_check(kernel, self.f) if kernel is not NattenKernel.AUTO else None
            if check is not None and asked and not check.available:
                runs = [k.value for k in NATTEN_AUTO_ORDER if natten_kernel_check(k, self.f).available]
                fix = (RULES["natten.usable"].fix(self.f) if not runs else  # natten itself is missing or unbuilt
                       f"set diffvae.natten_kernel = \"auto\" (here: {', '.join(runs)})")
                self.put(key, None, Status.ERROR, [Step(kernel.value, check.reason)],
                         ["natten.usable"], f"{kernel} cannot run here: {check.reason}", fix)
                return
            self.unused(key, f"the NA backend is {na}" if na else "the NA backend cannot run (see diffvae.na_backend)")
            return
        chain = []
        for k in _natten_candidates(self.f):
            check = natten_kernel_check(k, self.f)
            if not check.available:
                chain.append(Step(k.value, check.reason))
                continue
            prefix = ""
            if kernel is NattenKernel.AUTO:
                prefix = "auto (" + (_tuned_reason(self.f, "diffvae.na_backend", f"natten:{k.value}")
                                     or "blackwell > hopper > cutlass > flex") + "): "
            chain.append(Step(k.value, prefix + f"runs {self.f.dtype} head_dim {self.f.head_dim} here"))
            if k is NattenKernel.FLEX and not RULES["natten.flex-slow"].holds(self.f):
                rule = RULES["natten.flex-slow"]
                self.put(key, k, Status.WARNING, chain, ["natten.flex-slow"], rule.message(self.f), rule.fix(self.f))
            else:
                self.put(key, k, Status.OK, chain, ["natten.usable"])
            return

    def _mode(self) -> None:
        key = "diffvae.mode"
        mode, f, auto = self.p.diffvae.mode, self.f, ""
        na = self.out["diffvae.na_backend"].effective
        if mode is DiffVAEMode.AUTO:
            mode, why = diffvae_auto(f)
            f, auto = dataclasses.replace(f, profile=self.p.replace(**{key: mode})), f"auto ({why}): "
        if value(key, mode).needs:
            self.require(key, value(key, mode).needs, value(key, mode).text)
            return
        reason = auto + value(key, mode).text.replace("the NA", f"the {na or '?'} NA")
        ltx2_only = [r for r in ("diffvae.compile-off", "diffvae.combined-needs-natten") if not RULES[r].holds(f)]
        if na is not None and ltx2_only:
            rule = RULES[ltx2_only[0]]
            self.put(key, mode, Status.WARNING, [Step(mode.value, reason), Step(mode.value, rule.message(f))],
                     [rule.id], rule.message(f), rule.fix(f))
        else:
            self.ok(key, reason, mode)

    def attention(self) -> None:
        key = "transformer.attention"
        a = self.p.transformer.attention
        rule_of = {Attention(v): d.needs[0] for v, d in VALUES[key].items() if d.needs}
        if a is Attention.AUTOMATIC:
            sm = self.f.sm
            order = [Attention.SDPA_CUDNN, Attention.SDPA_FLASH, Attention.SDPA_EFFICIENT, Attention.SDPA_MATH]
            if sm and sm[0] == 9:
                order = [Attention.FA3, Attention.FA4] + order
            elif sm and sm[0] == 10:
                order = [Attention.FA4] + order
            elif not self.f.cuda and self.f.cap.platform == "darwin":
                order = [Attention.MPS_SDPA] + order
            # plain PyTorch attention last on CUDA: only a measurement moves it up. Without CUDA it comes
            # before the math backend: torch's own SDPA dispatch takes its fused CPU kernel (--tune on the
            # 2-core dev machine: 383.7 ms against sdpa_math's 585.4 at 224x224x9)
            order = order + [Attention.PYTORCH] if self.f.cuda else order[:-1] + [Attention.PYTORCH, order[-1]]
            chain = []
            for cand in _measured_first(self.f, key, tuple(order)):
                rule = rule_of.get(cand)
                if rule and not RULES[rule].holds(self.f):
                    chain.append(Step(cand.value, RULES[rule].message(self.f)))
                    continue
                chain.append(Step(cand.value, "automatic: " + (_tuned_reason(self.f, key, cand.value)
                                                              or "best available for " + self.f.sm_text)))
                self.put(key, cand, Status.OK, chain, [rule] if rule else [])
                return
        elif a in rule_of:
            self.require(key, [rule_of[a]], f"{a} available")
        else:
            self.ok(key, value(key, a).text)

    def quantization(self) -> None:
        self._quantization()
        q = self.out["transformer.quantization"].effective
        if q in (None, Quantization.NONE.value):
            self.unused("transformer.quantization_scope", "nothing is quantized")
        else:
            self.ok("transformer.quantization_scope",
                    value("transformer.quantization_scope", self.p.transformer.quantization_scope).text)

    def _quantization(self) -> None:
        key = "transformer.quantization"
        q = self.p.transformer.quantization
        if self.p.parallel.gpus > 1:
            if q is Quantization.FP8_CAST:
                self.ok(key, "fp8-cast, what LTX-2's multi-GPU modules build on every rank",
                        rules=["parallel.ignores-quant-offload"])
            else:
                self.mgpu_dropped(key)
            return
        about = value(key, q)
        if self.require(key, about.needs, about.text) and about.runner == LOADER:
            self.warn(key, "quant.loader-only", reason=about.text)

    def sparse(self) -> None:
        s = self.p.transformer.sparse_attention
        if s is SparseAttention.NONE:
            self.ok("transformer.sparse_attention", value("transformer.sparse_attention", "none").text)
            self.unused("transformer.sla_topk", "sparse_attention is none")
        else:
            self.require("transformer.sparse_attention", value("transformer.sparse_attention", s).needs,
                         value("transformer.sparse_attention", s).text)
            self.ok("transformer.sla_topk", f"keep the top {self.p.transformer.sla_topk:g} of blocks")
        if not self.p.transformer.fast_norm:
            self.ok("transformer.fast_norm", "LTX-2's own norm ops")
        elif self.f.cuda:
            self.ok("transformer.fast_norm", "one-pass norms (kernels.adaln, kernels.dit_qk)")
        else:
            self.ok("transformer.fast_norm", f"LTX-2's own norm ops: the one-pass kernels run on CUDA "
                                             f"({self.f.no_cuda_reason})")

    def compile(self) -> None:
        c = self.p.compile
        keys = ("compile.mode", "compile.backend", "compile.fullgraph", "compile.dynamic", "compile.capture")
        enabled, why = compiles(self.f)
        auto = f"auto ({why}): " if why else ""
        if not enabled:
            self.ok("compile.enabled", auto + value("compile.enabled", "false").text, False)
            for k in keys[:-1]:
                self.unused(k, "compile.enabled is false" if not auto else "compile.enabled = auto runs eager")
            self._eager_capture()
            return
        f = self.f
        does = auto + value("compile.enabled", "true").text
        if RULES["parallel.compile-barrier"].holds(f):
            self.ok("compile.enabled", does, True)
        else:
            self.warn("compile.enabled", "parallel.compile-barrier", True, reason=does)
        self._graphs((("compile.mode", c.mode, c.mode in CUDA_GRAPH_MODES),
                      ("compile.capture", c.capture, c.capture)))
        backend = value("compile.backend", c.backend)
        if backend.needs:
            self.require("compile.backend", backend.needs, backend.text)
        else:
            self.ok("compile.backend", backend.text)
        self.ok("compile.fullgraph", "one graph per block, fail on breaks" if c.fullgraph else "graph breaks allowed")
        if c.dynamic is Dynamic.TRUE:
            self.warn("compile.dynamic", "compile.dynamic")
        else:
            self.ok("compile.dynamic", value("compile.dynamic", c.dynamic).text)

    def _eager_capture(self) -> None:
        """compile.capture without compile: ltx-tui's runtime captures LTX-2's loop of eager blocks on
        one CUDA GPU with resident weights (no LTX-2 flag says it); elsewhere the loop runs as it is."""
        f = self.f
        if not self.p.compile.capture:
            self.ok("compile.capture", "no CUDA graph capture")
            return
        why, fix = ((f"no CUDA device ({f.no_cuda_reason})", "run on a CUDA GPU") if not f.cuda else
                    ("the eager capture runs on one GPU (under sequence parallelism LTX-2's all2all runs inside the "
                     "loop)", "set compile.enabled = true to capture the compiled loop") if f.multi else
                    (RULES["compile.cuda-graphs-streamed"].message(f), "set offload.mode = \"none\" to keep the capture")
                    if f.profile.offload.mode is not OffloadMode.NONE else (None, None))
        if why is None:
            self.ok("compile.capture", "captured: LTX-2's block loop (eager blocks) as one CUDA graph per input "
                    "shape, from its second call (ltx-tui's runtime; no LTX-2 flag)", rules=["compile.cuda-graphs-cuda"])
        else:
            self.put("compile.capture", False, Status.FALLBACK,
                     [Step(True, "LTX-2's block loop of eager blocks as CUDA graphs"),
                      Step(False, f"the loop runs as it is: {why}")], [], why,
                     f"{fix}, or set compile.capture = false")

    def _graphs(self, options: tuple) -> None:
        """compile.mode / compile.capture of compiled blocks: (key, asked, whether it means CUDA graphs) each."""
        c, f = self.p.compile, self.f
        streamed = not RULES["compile.cuda-graphs-streamed"].holds(f)
        for key, asked, graphs in options:
            if not graphs:
                self.ok(key, f"{c.mode} (no CUDA graphs)" if key == "compile.mode" else "no CUDA graph capture")
            elif not self.require(key, ["compile.cuda-graphs-cuda"], ""):
                continue
            elif streamed:
                rule = RULES["compile.cuda-graphs-streamed"]
                plain = CompileMode(value(key, c.mode).without_graphs) if key == "compile.mode" else False
                self.put(key, plain, Status.FALLBACK, [Step(_plain(asked), "CUDA graphs"),
                                                       Step(_plain(plain), rule.message(f))],
                         [rule.id], rule.message(f), rule.fix(f))
            else:
                what = f"{_plain(asked)} (CUDA graphs)" if key == "compile.mode" else \
                    ("captured: LTX-2's block loop as one CUDA graph per input shape (its prepare calls before it "
                     "too), from its second call")
                if not RULES["compile.cuda-graphs-single-gpu"].holds(f):
                    self.warn(key, "compile.cuda-graphs-single-gpu", reason=what)
                else:
                    self.ok(key, what, rules=["compile.cuda-graphs-cuda"])

    def offload(self) -> None:
        o = self.p.offload
        if o.mode is OffloadMode.NONE:
            self.ok("offload.mode", value("offload.mode", "none").text)
        elif self.p.parallel.gpus > 1:
            self.mgpu_dropped("offload.mode")
        elif self.require("offload.mode", [*value("offload.mode", o.mode).needs, "offload.loader-quantization"], ""):
            how = value("offload.mode", o.mode).text
            if RULES["offload.quantization"].holds(self.f):
                self.ok("offload.mode", how, rules=["cuda.device", "offload.quantization"])
            else:
                self.warn("offload.mode", "offload.quantization", reason=how)
        if o.mode is OffloadMode.NONE:
            self.unused("offload.gpu_slots", "offload.mode is none")
            self.unused("offload.prefetch", "offload.mode is none")
        elif self.out["offload.mode"].status is Status.ERROR:
            self.unused("offload.gpu_slots", "offload.mode cannot run as asked (see offload.mode)")
            self.unused("offload.prefetch", "offload.mode cannot run as asked (see offload.mode)")
        else:
            self.ok("offload.gpu_slots", f"{o.gpu_slots} GPU buffers for streamed blocks")
            in_flight = o.gpu_slots - 1  # one slot holds the block being computed
            if o.prefetch <= in_flight:
                self.ok("offload.prefetch", f"{o.prefetch} blocks fetched ahead")
            else:
                why = (f"of {o.gpu_slots} GPU slot(s) one holds the block being computed: at most {in_flight} "
                       "block(s) can be fetched ahead")
                most = int(OPTIONS_BY_KEY["offload.gpu_slots"].maximum)
                more = (f", or offload.gpu_slots to {most}" if o.prefetch + 1 == most else
                        f", or offload.gpu_slots to {o.prefetch + 1} or more" if o.prefetch < most else
                        f" (offload.gpu_slots goes up to {most}, so at most {most - 1} can be fetched ahead)")
                self.put("offload.prefetch", in_flight, Status.FALLBACK,
                         [Step(o.prefetch, "requested"), Step(in_flight, why)], [], why,
                         f"set offload.prefetch to at most {in_flight}{more}")

    def memory(self) -> None:
        m = self.p.memory
        if not m.expandable_segments:
            self.ok("memory.expandable_segments", "default CUDA caching allocator")
        elif self.f.cuda:
            self.ok("memory.expandable_segments",
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (must be set before CUDA initialises)")
        else:
            self.ok("memory.expandable_segments", "no effect without CUDA", False)
        self.ok("memory.max_batch_size", f"up to {m.max_batch_size} per batch")

    def parallel(self) -> None:
        """parallel.gpus: every multi-GPU requirement checked at once (each failing rule's message
        in the chain), then the warnings (what could not be verified); parallel.devices after."""
        par, f = self.p.parallel, self.f
        key = "parallel.gpus"
        if par.gpus == 1:
            self.require(key, ["parallel.gpu-count"], "one GPU")
        else:
            errors = ("parallel.gpu-count", "parallel.heads", "parallel.max-peers", "parallel.linux", "parallel.nccl",
                      "parallel.all2all", "parallel.all2all-arch", "parallel.peer-access", "parallel.sp-tokens")
            warnings = ("parallel.all2all-unverified", "parallel.peer-access-unverified")
            failed, doubts = self.failing(errors), self.failing(warnings)
            asked = f"sequence parallel over {par.gpus} GPUs"
            if f.run is None:
                tokens = f"SP token cap ({SP_MAX_TOKENS} video tokens) not checked: no run given (--resolution/--frames)"
            else:
                tokens = (f"{sp_tokens(f.run, par.gpus)} video tokens at {f.run.label} within the SP token cap "
                          f"({SP_MAX_TOKENS})")
            if failed:  # the chain also says what could not be verified, so one check names it all
                self.put(key, None, Status.ERROR, [Step(par.gpus, r.message(f)) for r in failed + doubts],
                         [r.id for r in failed + doubts], "; ".join(r.message(f) for r in failed),
                         "; ".join(dict.fromkeys(r.fix(f) for r in failed)))
            elif doubts:
                chain = [Step(par.gpus, f"{asked}; {tokens}")] + [Step(par.gpus, r.message(f)) for r in doubts]
                self.put(key, par.gpus, Status.WARNING, chain, [r.id for r in doubts],
                         "; ".join(r.message(f) for r in doubts), "; ".join(r.fix(f) for r in doubts))
            else:
                self.ok(key, f"{asked}; {tokens}", rules=errors + warnings)
        if par.devices is None and self.out[key].status is Status.ERROR:
            self.unused("parallel.devices", "parallel.gpus cannot run as asked (see parallel.gpus)")
        elif par.devices is None:
            self.ok("parallel.devices", f"the first {par.gpus} CUDA ordinal(s)", list(range(par.gpus)))
        else:
            self.require("parallel.devices", ["parallel.devices"], "the listed CUDA ordinals")

    def run(self) -> list[Decision]:
        self.diffvae()
        self.attention()
        self.quantization()
        self.sparse()
        self.compile()
        self.offload()
        self.memory()
        self.parallel()
        from backends.config.options import OPTIONS

        return [self.out[o.key] for o in OPTIONS]


def _plain(value: Any) -> Any:
    """JSON-friendly form of an option value."""
    if isinstance(value, enum.Enum):
        return value.plain()
    if isinstance(value, tuple):
        return list(value)
    return value


def decide(profile: Profile, capability: Capability, tuned: Tuned | None = None,
           run: RunShapes | None = None, length: RunLength | None = None) -> list[Decision]:
    """One decision per option of the vocabulary, in vocabulary order (see plan.resolve); with `run`
    (the run's shapes) the checks that depend on it too (the multi-GPU token cap); `length`: the
    run's length, what `auto` counts a compile over (default: `--tune --runs N`'s generations)."""
    return _Resolver(profile, capability, tuned, run, length).run()


@dataclass(frozen=True)
class Summary:
    ok: int
    fallback: int
    warning: int
    error: int

    def __str__(self) -> str:
        parts = [f"{n} {word}{'s' if n != 1 else ''}" for n, word in
                 ((self.error, "error"), (self.fallback, "fallback"), (self.warning, "warning")) if n]
        return ", ".join(parts) if parts else "all options run as asked"


def summarize(decisions: Iterable[Decision]) -> Summary:
    counts = {s: 0 for s in Status}
    for d in decisions:
        counts[d.status] += 1
    return Summary(counts[Status.OK], counts[Status.FALLBACK], counts[Status.WARNING], counts[Status.ERROR])


def exit_code(decisions: Iterable[Decision], *, strict: bool = False) -> int:
    """0 runnable as asked, 1 an error (or, under strict, any fallback or warning)."""
    s = summarize(decisions)
    return 1 if s.error or (strict and (s.fallback or s.warning)) else 0
