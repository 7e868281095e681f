"""Apply a profile: environment (`apply_env`) and model (`apply_profile`), with a report.

`apply_profile` resolves the profile into a plan (`backends.config.plan`) on this machine as the
model's device sees it, then takes the plan's steps in two passes: every step is prepared first
(targets found, callables built, each module checked against what its method can run), and only
when all are ready are they applied. A refusal therefore leaves the model untouched.

The steps, on LTX-2's real modules or any module that follows their protocols:
- `diffvae_layout`: LTX-2's DiffusionVideoDecoder laid out for `diffvae.mode` (`runtime.ltx2`);
- `na_backend`: an `NAFunction` on every module with `attention_function` and `kernel_size`;
- `dense_attention`: a `DenseFunction` on every module with `attention_function` and `heads`
  (the masked slot too, where the kernel can mask);
- `quantize`: quantized linears in `transformer.quantization_scope` (`include=` narrows it);
- `offload`: the transformer blocks' weights streamed from host memory (`runtime.offload`);
- `compile`: torch.compile per transformer block; with `compile.capture` on LTX-2's LTXModel its
  whole block loop is one CUDA graph per input shape (`runtime.block_graph`), the blocks compiled
  without graphs of their own; other CUDA graphs (compile.mode reduce-overhead / max-autotune, or
  capture on a model without that loop) are Inductor's, one per block: a step is marked at every
  forward of the model and its outputs are copied out of the graph pool; LTX-2's per-token
  timesteps that are equal across a modality's tokens go in as one row (`runtime.timestep_rows`);
- `capture`: compile.capture without compile: LTX-2's block loop captured the same way with its
  blocks eager (no compile time; the host's per-kernel work leaves the forward), one AdaLN row too.
What a compiled step did not compile (graph breaks, graphs that ran eagerly) the report counts
from the apply on (`ApplyReport.compile_health`, `runtime.compile_watch`).
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, MutableMapping

import torch
import torch.nn as nn
import torch.utils._pytree as pytree

from backends.config.options import OPTIONS, NABackend, NattenKernel, Profile, Quantization, toml_value
from backends.config.plan import PIPELINE, Plan, Step, plan_here
from backends.config.rules import Facts, Status, na_usable, natten_kernel_check
from backends.config.values import value
from backends.machine.capability import Capability, import_optional, probe
from backends.runtime.attention import DTYPE_NAMES, INFERENCE_ONLY, NAFunction
from backends.runtime.block_graph import LoopGraphs, capture_loop, loop_owner
from backends.runtime.compile_cache import mark_cacheable, use_compile_caches
from backends.runtime.compile_watch import CompileHealth, CompileWatch
from backends.runtime.dense_attention import DenseFunction
from backends.runtime import timestep_rows
from backends.runtime.ltx2 import apply_decoder_layout, is_diffusion_decoder
from backends.runtime.offload import BlockStreamer
from backends.runtime.quant import QuantizationPlan, fuse_gelu, plan_quantization

ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
EXPANDABLE = "expandable_segments:True"
# With no cuBLASLt workspace, the fp8 GEMMs at the DiT's token counts take cuBLAS's stream-scheduled
# kernels, which need no Memset before each launch (2 us in a CUDA graph) and run as fast or faster
# (bench/RESULTS.md, eleventh round); torch reads it at its first cuBLASLt call. A value already set stays.
LT_WORKSPACE = "CUBLASLT_WORKSPACE_SIZE"


class ProfileNotRunnable(RuntimeError):
    """The profile cannot be applied to this model here; the message lists each reason with its fix."""


@dataclass(frozen=True)
class Change:
    option: str
    action: str
    detail: str
    modules: tuple[str, ...] = ()


@dataclass
class ApplyReport:
    """What apply_profile did, an entry for every option of the vocabulary."""

    plan: Plan
    changes: list[Change] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    streamer: BlockStreamer | None = None
    compile_watch: CompileWatch | None = None  # set when a step compiled something
    loop_graphs: LoopGraphs | None = None  # compile.capture's graphs of the block loop, when captured

    def compile_health(self) -> CompileHealth | None:
        """Graph breaks and graphs that ran eagerly since the apply (None: nothing was compiled).
        Compiling happens at the first forwards: read it after them."""
        return None if self.compile_watch is None else self.compile_watch.health()

    def watch_compile(self) -> None:
        self.compile_watch = self.compile_watch or CompileWatch()

    def add(self, option: str, action: str, detail: str, modules=()) -> None:
        self.changes.append(Change(option, action, detail, tuple(modules)))

    def change(self, option: str) -> Change:
        """What was done for `option`."""
        for c in self.changes:
            if c.option == option:
                return c
        raise KeyError(f"{option!r} is not an option of the vocabulary")

    def __str__(self) -> str:
        width = max((len(c.option) for c in self.changes), default=10)
        lines = []
        for c in self.changes:
            value = toml_value(self.plan[c.option].effective)
            where = f" [{len(c.modules)} module(s): {', '.join(c.modules[:4])}{', ...' if len(c.modules) > 4 else ''}]" \
                if c.modules else ""
            lines.append(f"{c.option:<{width}} = {value:<22} {c.action:<10} {c.detail}{where}")
        lines += [f"warning: {w}" for w in self.warnings]
        health = self.compile_health()
        if health is not None and (health.graph_breaks or health.eager):
            lines.append(f"compile: {health}")
        if self.loop_graphs is not None and self.loop_graphs.reason:
            lines.append(f"compile.capture: the block loop runs without a CUDA graph: {self.loop_graphs.reason}")
        return "\n".join(lines)


def apply_env(profile: Profile, environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Set the allocator environment for `profile` (and, for fp8-scaled-mm, no cuBLASLt workspace:
    `LT_WORKSPACE`) and keep torch.compile's caches in ltx-tui's cache directory
    (`runtime.compile_cache`); returns warnings (CUDA initialised before the allocator setting
    changed). Calling it again is harmless."""
    environ = os.environ if environ is None else environ
    use_compile_caches(environ)
    if profile.transformer.quantization == Quantization.FP8_SCALED_MM:
        environ.setdefault(LT_WORKSPACE, "0")
    if not profile.memory.expandable_segments:
        return []
    current = environ.get(ALLOC_CONF, "")
    if EXPANDABLE in current.split(","):
        return []
    parts = [p for p in current.split(",") if p and not p.startswith("expandable_segments")]
    environ[ALLOC_CONF] = ",".join(parts + [EXPANDABLE])
    torch_mod = sys.modules.get("torch")
    if torch_mod is not None and torch_mod.cuda.is_initialized():
        return [f"CUDA is already initialised: {ALLOC_CONF}={EXPANDABLE} takes effect only in a new process; "
                "call backends.apply_env(profile) before any CUDA work"]
    return []


def find_blocks(model: nn.Module) -> tuple[str, list[nn.Module]]:
    """The transformer's repeated blocks: `transformer_blocks` (LTX-2), else the first ModuleList
    whose name ends in 'blocks', else the model itself. None in LTX-2's DiffVAE decoder."""
    if is_diffusion_decoder(model):
        return "", []
    lists = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.ModuleList) and n.split(".")[-1].endswith("blocks")]
    for name, child in sorted(lists, key=lambda nm: nm[0].split(".")[-1] != "transformer_blocks"):
        return name, list(child)
    return "", [model]


def _model_device(model: nn.Module) -> torch.device:
    for t in model.parameters():
        return t.device
    return torch.device("cpu")


def _module_dtype(module: nn.Module) -> torch.dtype:
    for t in module.parameters():
        if t.is_floating_point():
            return t.dtype
    return torch.float32


def _modules_with(model: nn.Module, *attrs: str, without: str | None = None) -> list[str]:
    return [n for n, m in model.named_modules()
            if all(hasattr(m, a) for a in attrs) and (without is None or not hasattr(m, without))]


# --- each step: prepare (checks, no change) returns the function that applies it -------------

Apply = Callable[[nn.Module, ApplyReport], None]


def _prepare_env(step: Step, model, plan, device, include) -> Apply:
    def apply(model, report):
        report.warnings += apply_env(plan.profile)
        if step.args["expandable_segments"]:
            report.add("memory.expandable_segments", "set", f"{ALLOC_CONF}={os.environ.get(ALLOC_CONF, '')!r}")
        else:
            report.add("memory.expandable_segments", "kept", plan["memory.expandable_segments"].chain[-1].reason)
    return apply


def _prepare_layout(step: Step, model, plan, device, include) -> Apply:
    mode = step.args["mode"]
    if not is_diffusion_decoder(model):
        return lambda model, report: report.add("diffvae.mode", "no target",
                                                "not LTX-2's DiffusionVideoDecoder: nothing to lay out")
    if mode == "blackwell_dsl":
        _require_import("ltx_kernels.vae", "diffvae.mode blackwell_dsl")

    def apply(model, report):
        if step.args["compile"]:
            report.watch_compile()
        apply_decoder_layout(model, mode)
        report.add("diffvae.mode", "laid out", f"{mode} (LTX-2's apply_diffvae_config"
                   + (", blocks compiled" if step.args["compile"] else "") + ")")
    return apply


def _prepare_na(step: Step, model, plan, device, include) -> Apply:
    backend = step.args["backend"]
    names = _modules_with(model, "attention_function", "kernel_size")
    if not names:
        def none(model, report):
            report.add("diffvae.na_backend", "no target", "no module with attention_function and kernel_size")
            report.add("diffvae.natten_kernel", "no target", "no NA module")
        return none
    for name in names:  # every module's dtype and head_dim against what the backend runs
        module = model.get_submodule(name)
        dtype, head_dim = _module_dtype(module), getattr(module, "head_dim", 64)
        facts = Facts(plan.capability, plan.profile, dtype=DTYPE_NAMES.get(dtype, str(dtype)), head_dim=head_dim)
        why = None
        if backend.startswith("natten:"):
            check = natten_kernel_check(NattenKernel(backend.split(":")[1]), facts)
            why = check.reason if not check.available else None
        elif backend == "triton" and not na_usable(NABackend.TRITON, facts).available:
            why = na_usable(NABackend.TRITON, facts).reason
        if why:
            raise ProfileNotRunnable(f"diffvae.na_backend {backend} cannot run {name} ({dtype}, head_dim "
                                     f"{head_dim}): {why}")
    function = NAFunction(backend)

    def apply(model, report):
        model.register_forward_pre_hook(_inference_only)  # before any compiled region can trip on grad
        for name in names:
            module = model.get_submodule(name)
            module.attention_function = function
            if hasattr(module, "natten_backend"):  # LTX-2 mirrors its NATTEN pin there
                module.natten_backend = None
        reason = plan["diffvae.na_backend"].chain[-1].reason
        report.add("diffvae.na_backend", "installed", f"{function!r} ({reason})", names)
        kernel = plan["diffvae.natten_kernel"].effective
        report.add("diffvae.natten_kernel", "installed" if kernel else "unused",
                   kernel or plan["diffvae.natten_kernel"].chain[-1].reason)
    return apply


def _inference_only(model: nn.Module, args) -> None:
    """The NA backends are forward-only: refuse a forward that would record gradients, clearly and
    before any compiled region (where it would fail inside a custom op with no autograd)."""
    if torch.is_grad_enabled() and any(p.requires_grad for p in model.parameters()):
        raise RuntimeError(INFERENCE_ONLY)


def _prepare_dense(step: Step, model, plan, device, include) -> Apply:
    names = _modules_with(model, "attention_function", "heads", without="kernel_size")
    if not names:
        return lambda model, report: report.add("transformer.attention", "no target",
                                                "no module with attention_function and heads")
    try:
        function = DenseFunction(step.args["name"])
    except RuntimeError as e:
        raise ProfileNotRunnable(f"transformer.attention {step.args['name']}: {e}") from None

    def apply(model, report):
        kept = []
        for name in names:
            module = model.get_submodule(name)
            module.attention_function = function.for_module(module)
            if hasattr(module, "masked_attention_function"):
                if function.masks:
                    module.masked_attention_function = function
                else:
                    kept.append(name)
        report.add("transformer.attention", "installed", f"{function!r} "
                   f"({plan['transformer.attention'].chain[-1].reason})", names)
        if kept:
            report.warnings.append(f"transformer.attention {function.name} has no mask kernel: masked_attention_function "
                                   f"kept as it was on {len(kept)} module(s) ({', '.join(kept[:3])}"
                                   f"{', ...' if len(kept) > 3 else ''})")
    return apply


ONE_ROW = "; timesteps equal across a modality's tokens passed as one AdaLN row"  # what timestep_rows.install did


def _prepare_fast_norm(step: Step, model, plan, device, include) -> Apply:
    from backends.runtime import fast_norm

    def apply(model, report):
        names = fast_norm.install(model, traced=step.args["traced"])
        if not names:
            report.add("transformer.fast_norm", "no target", "no module with ada_zero_function and post_sa_function "
                       "(LTX-2's DiT blocks)")
            return
        rows = timestep_rows.install(model)
        where = (("on CUDA; compiled, as custom ops replayed in CUDA graphs, a norm before fp8-scaled-mm linears "
                  "writing their fp8 rows" if step.args["traced"] else
                  "on CUDA; compiled blocks without CUDA graphs keep Inductor's fusion")
                 if device.type == "cuda" else
                 f"on {device} the blocks' own ops run: the kernels run on CUDA")
        report.add("transformer.fast_norm", "installed", f"kernels.adaln's one-pass ada_zero and post_sa in the "
                   f"blocks' norm slots, kernels.dit_qk's q/k norm + RoPE in their attentions' ({where})" +
                   (ONE_ROW if rows else ""), names)
    return apply


def _require_import(module: str, what: str) -> None:
    mod, why = import_optional(module)
    if mod is None:
        raise ProfileNotRunnable(f"{what} needs {module}, which is not importable ({why})")


def _prepare_quantize(step: Step, model, plan, device, include) -> Apply:
    method, scope = step.args["method"], step.args["scope"]
    if step.args.get("loader"):
        raise ProfileNotRunnable(f"transformer.quantization = {method}: only LTX-2's loader applies it, while it builds "
                                 f"the DiT; apply_profile cannot quantize a built model with it (fix: run through "
                                 f"`ltx-tui run`, which passes --quantization {method} to LTX-2, or use fp8-scaled-mm)")
    qplan = plan_quantization(model, method, scope, include)
    norms = plan.step("fast_norm")
    lt = method == "fp8-scaled-mm" and norms is not None and norms.args["traced"]
    if lt:
        from backends.runtime.fused_ff import FusedFeedForward

        lt = FusedFeedForward.enabled  # off by default (its first forward: runtime.fused_ff)
    lt_why = None if device.type == "cuda" else f"the model runs on {device}"
    if lt and lt_why is None:
        from kernels.lt_ff import available

        lt_why = available(device)

    v8 = method == "fp8-scaled-mm" and norms is not None and norms.args["traced"] and device.type == "cuda"

    def apply(model, report):
        ffs = []
        if lt and lt_why is None:
            from backends.runtime.fused_ff import fuse_ff

            ffs = fuse_ff(model, qplan.targets)
        vs = []
        if v8:  # the attentions are installed by now (dense_attention comes first)
            from backends.runtime import v_e4m3

            vs = v_e4m3.targets(model, qplan.targets)
        targets = tuple(t for t in qplan.targets if not any(t.startswith(f"{n}.") for n in ffs) and t not in vs)
        replaced = QuantizationPlan(method, targets, qplan.skipped).apply(model)
        if vs:
            v_e4m3.install(model, vs)
        fused = fuse_gelu(model) if method == "fp8-scaled-mm" else []
        scope_text = scope + (f", include={include!r}" if include else "")
        ff_text = (f"; {len(ffs)} FeedForward(s) in two cuBLASLt fp8 calls (kernels.lt_ff: the GELU in the first's "
                   f"epilogue, the block's gated residual in the second's)" if ffs else "")
        if fused:
            ff_text += f"; the GELU of {len(fused)} FeedForward(s) inside the row quantization of their second linear"
        if vs:
            ff_text += (f"; v of {len(vs)} video self-attention(s) by one scale a tensor, written in e4m3 by its GEMM "
                        f"for cuDNN's fp8 attention (runtime.v_e4m3)")
        if fused and lt and lt_why:
            ff_text += f" (not cuBLASLt's: {lt_why})"
        report.add("transformer.quantization", "replaced" if replaced or ffs or vs else "no target",
                   f"{method} linears in scope {scope_text}{ff_text}" if replaced or ffs or vs
                   else f"no nn.Linear in scope {scope_text} that {method} can run",
                   replaced + [t for t in qplan.targets if t not in targets])
        report.add("transformer.quantization_scope", "set", scope)
        for name, why in qplan.skipped:
            report.warnings.append(f"transformer.quantization {method}: {name} kept as it was: {why}")
    return apply


def _prepare_offload(step: Step, model, plan, device, include) -> Apply:
    blocks_name, blocks = find_blocks(model)
    if not blocks:
        def none(model, report):
            model.to(device)
            for key in ("offload.mode", "offload.gpu_slots", "offload.prefetch"):
                report.add(key, "no target", "no transformer blocks (LTX-2's DiffVAE decoder is configured by diffvae.*)")
        return none
    if device.type != "cuda":
        raise ProfileNotRunnable(f"offload.mode {step.args['mode']} streams weights to a CUDA device; the model "
                                 f"runs on {device}")

    def apply(model, report):
        a = step.args
        ids = {id(t) for b in blocks for t in [*b.parameters(), *b.buffers()]}
        streamer = BlockStreamer(blocks, device, gpu_slots=a["gpu_slots"], prefetch=a["prefetch"], mode=a["mode"])
        for t in [*model.parameters(), *model.buffers()]:
            if id(t) not in ids:
                t.data = t.data.to(device)
        report.streamer = streamer
        report.add("offload.mode", "offloaded",
                   f"{len(blocks)} blocks of {blocks_name or 'the model'} ({streamer.streamed_bytes / 2**20:.0f} MiB) in "
                   f"{'pinned CPU memory' if a['mode'] == 'cpu' else 'a memory-mapped file'}, streamed to {device}",
                   [f"{blocks_name}.{i}" for i in range(len(blocks))] if blocks_name else [])
        report.add("offload.gpu_slots", "set", f"{streamer.gpu_slots} slots of {streamer.slot_bytes / 2**20:.0f} MiB")
        report.add("offload.prefetch", "set", f"{streamer.prefetch} block(s) ahead")  # the plan's, within the slots
    return apply


def compile_kwargs(args: dict[str, Any], loop_graph: bool = False) -> dict[str, Any]:
    """torch.compile keyword arguments for the plan's compile step; `loop_graph`: the block loop is
    captured whole (`runtime.block_graph`), so the blocks compile without CUDA graphs of their own."""
    kwargs: dict[str, Any] = {"backend": args["backend"], "fullgraph": args["fullgraph"],
                              "dynamic": {"auto": None, "true": True, "false": False}[args["dynamic"]]}
    if args["backend"] == "inductor":
        mode = (value("compile.mode", args["mode"]).without_graphs or args["mode"]) if loop_graph else args["mode"]
        if mode != "default":
            kwargs["mode"] = mode
        elif args["capture"] and not loop_graph:
            kwargs["options"] = {"triton.cudagraphs": True}
    return kwargs


def _step_begin(module, args) -> None:
    torch.compiler.cudagraph_mark_step_begin()


def _copy_out(module, args, output):
    """Outputs of a CUDA graph live in its pool and are overwritten by the next step: hand out copies."""
    return pytree.tree_map_only(torch.Tensor, lambda t: t.clone(), output)


# Dynamo's default of 8 graphs a code object would run the blocks eagerly once a process has met
# more shapes (resolutions, stages, one-token and per-token timesteps, perturbations); LTX-2's own
# compile allows 256 (ltx_core/model/transformer/compiling.py, `cache_size_limit`).
RECOMPILE_LIMIT = 256


def _recompile_limit(forward: Callable) -> Callable:
    """`forward` run under Dynamo's RECOMPILE_LIMIT (once a forward, as LTX-2 patches its config)."""
    @functools.wraps(forward)
    def run(*args, **kwargs):
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            return forward(*args, **kwargs)
    return run


def _prepare_compile(step: Step, model, plan, device, include) -> Apply:
    blocks_name, blocks = find_blocks(model)
    if not blocks:
        def none(model, report):
            for key in step.options:
                report.add(key, "no target", "no transformer blocks (LTX-2's DiffVAE decoder is compiled by diffvae.mode)")
        return none
    graphs = step.args["cudagraphs"]
    if graphs and device.type != "cuda":
        raise ProfileNotRunnable(f"compile with CUDA graphs needs the model on a CUDA device, not {device}")
    loop = step.args["capture"] and step.args["backend"] != "cudagraphs" and loop_owner(model) is not None
    kwargs = compile_kwargs(dict(step.args), loop)

    def apply(model, report):
        report.watch_compile()
        from backends.runtime import shared_rows

        shared_rows.install()  # one fp8 row quantization per input in a compiled block
        rows = timestep_rows.install(model)
        for block in blocks:
            block.forward = torch.compile(block.forward, **kwargs)
        model.forward = _recompile_limit(model.forward)
        if loop:
            report.loop_graphs = capture_loop(model)
        elif graphs:
            model.register_forward_pre_hook(_step_begin)
            model.register_forward_hook(_copy_out)
        names = [f"{blocks_name}.{i}" for i in range(len(blocks))] if blocks_name else [type(model).__name__]
        detail = f"torch.compile per block of {blocks_name or 'the whole model'}: " + ", ".join(
            f"{k}={v}" for k, v in kwargs.items()) + (
            "; the block loop captured as one CUDA graph per input shape (LTX-2's prepare calls before it "
            "too), from its second call" if loop else
            "; CUDA-graph step marked at each forward" if graphs else "") + (
            ONE_ROW if rows else "")
        report.add("compile.enabled", "compiled", detail, names)
        for key in step.options[1:]:
            report.add(key, "set", toml_value(plan[key].effective))
    return apply


def _prepare_capture(step: Step, model, plan, device, include) -> Apply:
    """compile.capture without compile: LTX-2's block loop captured with its blocks as they are
    (eager), so a forward costs the GPU's work and no host work per kernel."""
    if device.type != "cuda":
        raise ProfileNotRunnable(f"compile.capture needs the model on a CUDA device, not {device}")

    def apply(model, report):
        graphs = capture_loop(model)
        if graphs is None:
            report.add("compile.capture", "no target", "no LTX-2 LTXModel block loop: without compile, capture takes "
                       "only LTX-2's DiT")
            return
        report.loop_graphs = graphs
        rows = timestep_rows.install(model)
        report.add("compile.capture", "captured", "LTX-2's block loop, its blocks eager, as one CUDA graph per input "
                   "shape (its prepare calls before it too), from its second call" +
                   (ONE_ROW if rows else ""),
                   [type(graphs.owner).__name__])
    return apply


PREPARE: dict[str, Callable[..., Apply]] = {
    "env": _prepare_env, "diffvae_layout": _prepare_layout, "na_backend": _prepare_na,
    "dense_attention": _prepare_dense, "fast_norm": _prepare_fast_norm, "quantize": _prepare_quantize,
    "offload": _prepare_offload, "compile": _prepare_compile, "capture": _prepare_capture,
}


def _check_device(device: torch.device) -> None:
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA device is visible"
            raise ProfileNotRunnable(f"device {device}: {why}; pass device='cpu' or run on a CUDA machine")
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise ProfileNotRunnable(f"device {device}: only {torch.cuda.device_count()} CUDA device(s) are visible")


def apply_profile(model: nn.Module, profile: Profile | Plan, capability: Capability | None = None, *,
                  device: torch.device | str | None = None, include: str | None = None,
                  place: bool = True) -> ApplyReport:
    """Configure `model` in place as `profile` (or an already resolved plan) says; returns what was done.

    `device`: where the model runs (default: where its parameters are); with offload the blocks'
    weights stay in host memory and stream to it. `include`: a glob over module names narrowing
    the quantized linears. `place=False` leaves the weights where they are (a model whose placement
    its builder owns, such as LTX-2's block-streaming wrapper). `auto` values follow this machine's tune cache (`ltx-tui --tune`), as
    `--check` resolves them. Raises ProfileNotRunnable, with the model untouched, when a step
    cannot run here.
    """
    device = torch.device(device) if device is not None else _model_device(model)
    _check_device(device)
    use_compile_caches()  # before anything compiles: a later process compiles from the cache
    mark_cacheable()
    if isinstance(profile, Plan):
        plan = profile
    else:  # `auto` follows what `ltx-tui --tune` measured on this machine, as in --check
        plan = plan_here(profile, capability or probe(), device)
    if plan.blocking:
        raise ProfileNotRunnable(plan.refusal())
    steps = {s.kind: s for s in plan.steps}
    prepared = []
    for kind in PREPARE:
        step = steps.get(kind)
        if kind == "offload" and step is None:  # no streaming: the model is placed on the device there
            if place:
                prepared.append(_place(device))
        elif step is not None:
            prepared.append(PREPARE[kind](step, model, plan, device, include))
    report = ApplyReport(plan)
    for apply in prepared:
        apply(model, report)
    _report_the_rest(report)
    return report


def _place(device: torch.device) -> Apply:
    def apply(model, report):
        model.to(device)
        report.add("offload.mode", "kept", f"weights resident on {device}")
    return apply


def _report_the_rest(report: ApplyReport) -> None:
    done = {c.option for c in report.changes}
    plan = report.plan
    for spec in OPTIONS:
        key = spec.key
        d = plan[key]
        if key in done:
            pass
        elif key in PIPELINE:
            report.add(key, "pipeline", PIPELINE[key])
        elif d.effective is None:
            report.add(key, "unused", d.chain[-1].reason.removeprefix("unused: "))
        else:
            report.add(key, "kept", plan.runtime_text(key))
        if d.status in (Status.FALLBACK, Status.WARNING):
            report.warnings.append(f"{key}: {d.message}")
    order = [o.key for o in OPTIONS]
    report.changes.sort(key=lambda c: order.index(c.option))
