"""Where `ltx-tui run` meets LTX-2: wrappers on its builders and pipeline blocks.

Every model an LTX-2 v1.2.0 pipeline loads passes through one of two builders:
`SingleGPUModelBuilder.build` and, with `--offload`, `StreamingModelBuilder.build`. The wrapper
- takes LTX-2's `diffvae_mode_*` layout op off a DiffVAE decoder's builder (ltx-tui lays it out),
- hands the builder a registry that never returns a cached model shell ltx-tui has modified
  (LTX-2 reuses shells: distilled's second DiT build would get the first build's quantized
  linears with their buffers on the meta device),
- builds, then applies the plan's steps for that model (`apply_profile` with the plan narrowed to
  the steps the flag policy leaves to ltx-tui) and records load and apply seconds.
Weights LTX-2's safetensors loader reads onto a CUDA device go through `pinned_load` (chunks in
pinned buffers, reads overlapping the copies; the same state dict). A DiT built again with the
same checkpoint, LoRAs, ops, device and dtype (distilled's stage 2) gets the model the first
build made, kept on the device in between (`keep_dit`: LTX-2 would dispose it after stage 1 and
read all its weights again; `X0Model.dispose` skips the kept one), when its weights take at most
`KEEP_FRACTION` of the GPU's memory; it is let go when a decoder starts. The pipeline blocks
(`ltx_pipelines.utils.blocks`) are wrapped for the stage meter.
Everything is restored on exit; LTX-2's files are never edited.

Under LTX-2's sequence parallelism (the `*_mgpu` modules, `backends.launch.mgpu`) the DiT's
attention slots hold LTX-2's all2all wrappers: each moves heads between the ranks, calls the
function it keeps as `.original_attention` on the rank's share of the heads, and moves the result
back. The plan's dense attention belongs in `.original_attention`, never over the wrapper (that
would run attention on this rank's tokens only, without the other ranks': wrong results, no error):
`inside_sp_wrappers` hands the apply the wrapped functions, then puts the wrappers back around
whatever the apply installed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch.nn as nn

from backends.config.plan import Plan
from backends.launch.meter import Meter, forward_hook, forward_pre_hook
from backends.runtime.block_graph import release_loop_graphs
from backends.runtime.ltx2 import is_diffusion_decoder

MARK = "_ltx_tui_applied"  # set on every model the plan was applied to
STEP_HOOK = "_ltx_tui_step_hooks"  # the handles of the step meter's hooks on an LTXModel
KEEP_FRACTION = 0.5  # a DiT whose weights take more of the GPU's memory is not kept between stages
DECODES = ("video_decode", "audio_decode")  # stages after the last denoising: a kept DiT is let go
LTX2_LAYOUT_OPS = ("diffvae_mode_", "cutlass_fna_diffusion_decoder", "compile_diffusion_decoder")
# LTX-2 v1.2.0's sequence-parallel attention wrappers (ltx_core/multigpu/transformer/attention.py): each
# keeps the attention function it calls on the rank's heads as `.original_attention`.
SP_MODULE = "ltx_core.multigpu.transformer.attention"
SP_WRAPPERS = ("All2AllAttention", "MaskedAll2AllAttention", "AudioAll2AllAttention", "MaskedAudioAll2AllAttention")
SP_SLOTS = ("attention_function", "masked_attention_function")
BLOCKS = (("PromptEncoder", "text_encoder"), ("ImageConditioner", "image_condition"), ("DiffusionStage", "denoise"),
          ("VideoUpsampler", "upsample"), ("VideoDecoder", "video_decode"), ("AudioDecoder", "audio_decode"))


@dataclass
class Built:
    """One model LTX-2 built, and what ltx-tui did to it."""

    model: str
    stage: str
    load_s: float
    apply_s: float = 0.0
    report: Any = None  # the ApplyReport, when the plan was applied
    params: int | None = None
    kept: bool = False  # the model an earlier stage built, kept on the device (nothing loaded)
    notes: list[str] = field(default_factory=list)  # what the launcher did around the apply

    @property
    def applied(self) -> bool:
        return self.report is not None or self.kept

    @property
    def changes(self) -> tuple[str, ...]:
        """'option: action detail' for each option the plan did something for on this model."""
        if self.report is None:
            return tuple(self.notes)
        return tuple(f"{c.option}: {c.action} {c.detail}" for c in self.report.changes
                     if c.action not in ("kept", "unused", "pipeline", "no target")) + tuple(self.notes)

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(self.report.warnings) if self.report is not None else ()

    @property
    def compile(self) -> str | None:
        """What torch.compile did not compile since the apply, and whether the block loop's graphs were
        replayed or why the loop ran without them (None: the plan compiled and captured nothing here)."""
        if self.report is None:
            return None
        health, graphs = self.report.compile_health(), self.report.loop_graphs
        parts = [] if health is None else [str(health)]
        if graphs is not None:
            parts.append(f"block loop not captured: {graphs.reason}" if graphs.reason else
                         f"block loop captured, {graphs.replays} replay(s)")
        return "; ".join(parts) or None


def describe(built: Built, prefix: str = "ltx-tui") -> str:
    """The terminal lines for one model build."""
    if built.kept:
        return f"{prefix}: {built.model} for {built.stage}: the one built earlier, kept on the device (nothing loaded)"
    head = (f"{prefix}: {built.model} built for {built.stage}: load {built.load_s:.2f} s"
            + (f", plan applied in {built.apply_s:.2f} s" if built.applied else ", left as LTX-2 built it"))
    return "\n".join([head] + [f"    {c}" for c in built.changes] + [f"    warning: {w}" for w in built.warnings])


def is_sp_wrapper(function: Any) -> bool:
    """Whether `function` is one of LTX-2's sequence-parallel all2all attention wrappers."""
    return any(c.__name__ in SP_WRAPPERS and c.__module__ == SP_MODULE for c in type(function).__mro__)


@contextlib.contextmanager
def inside_sp_wrappers(model: nn.Module):
    """While the body runs, every attention slot of `model` that holds an SP wrapper holds the
    wrapper's `.original_attention` instead; afterwards the wrapper is back in the slot, calling
    whatever the body left there (the plan's dense attention, or the function it had: a refused
    apply changes nothing). Yields the list of (module name, slot) it unwrapped."""
    unwrapped = []
    for name, module in model.named_modules():
        for slot in SP_SLOTS:
            function = getattr(module, slot, None)
            if function is not None and is_sp_wrapper(function):
                unwrapped.append((name, module, slot, function))
                setattr(module, slot, function.original_attention)
    try:
        yield [(name, slot) for name, _, slot, _ in unwrapped]
    finally:
        for _, module, slot, wrapper in unwrapped:
            wrapper.original_attention = getattr(module, slot)
            setattr(module, slot, wrapper)


def is_ltx_model(model: nn.Module) -> bool:
    """LTX-2's DiT (`ltx_core...LTXModel`), checked by class so no import is needed."""
    return any(c.__name__ == "LTXModel" and c.__module__.startswith("ltx_core.") for c in type(model).__mro__)


class _ShellGuard:
    """A registry that never hands out a model shell ltx-tui has changed (it forgets it instead)."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def get_model(self, key):
        model = self._inner.get_model(key)
        if model is not None and getattr(model, MARK, False):
            self._inner.pop_model(key)
            return None
        return model

    def __getattr__(self, name):
        return getattr(self._inner, name)


@dataclass
class Hooks:
    """Install with `with hooks.installed(): ...`; `built` lists every model build afterwards."""

    plan: Plan
    dit_steps: tuple[str, ...]
    decoder_steps: tuple[str, ...]
    meter: Meter
    on_built: Callable[[Built], None] = lambda built: None
    take_over: bool = True  # False: LTX-2 as built (its layout op and shell cache kept; only measured)
    keep_dit: bool = True
    built: list[Built] = field(default_factory=list)
    kept: tuple[Any, nn.Module] | None = None  # (build key, the DiT kept for the next stage)

    def _narrow(self, kinds: tuple[str, ...]) -> Plan:
        return dataclasses.replace(self.plan, steps=tuple(s for s in self.plan.steps if s.kind in kinds))

    def _stage_name(self) -> str:
        return self.meter.active[-1].name if self.meter.active else "(outside a stage)"

    def _finish(self, model, load_s: float, device) -> Any:
        from backends.runtime.apply import apply_profile

        kinds = self.dit_steps if is_ltx_model(model) else self.decoder_steps if is_diffusion_decoder(model) else None
        built = Built(type(model).__name__, self._stage_name(), load_s, params=_params(model))
        if is_ltx_model(model):
            self._meter_steps(model)
        if kinds and self.take_over:
            t = time.perf_counter()
            with inside_sp_wrappers(model) as unwrapped:
                built.report = apply_profile(model, self._narrow(kinds), device=device)
            built.apply_s = time.perf_counter() - t
            if unwrapped:
                built.notes.append(f"sequence parallel: the plan's attention installed inside LTX-2's all2all wrappers "
                                   f"(as their original_attention) on {len(unwrapped)} slot(s); the wrappers stay")
            setattr(model, MARK, True)
        self._credit(built)
        return model

    def _credit(self, built: Built) -> None:
        if self.meter.active:
            self.meter.active[-1].load_s += built.load_s
            self.meter.active[-1].apply_s += built.apply_s
        self.built.append(built)
        self.on_built(built)

    def _wrap_single(self, original):
        hooks = self

        def build(self, device=None, dtype=None, **kwargs):
            key = _build_key(self, device, dtype) if hooks.take_over and hooks.keep_dit else None
            if hooks.kept is not None:
                if key is not None and hooks.kept[0] == key:
                    hooks._credit(Built(type(hooks.kept[1]).__name__, hooks._stage_name(), 0.0,
                                        params=_params(hooks.kept[1]), kept=True))
                    return hooks.kept[1]
                if _builds_ltx_model(self):
                    hooks.let_go()  # another DiT: the kept one goes
            builder = self
            if hooks.take_over:
                ops = tuple(self.module_ops)
                kept = tuple(op for op in ops if not op.name.startswith(LTX2_LAYOUT_OPS))
                builder = self.with_registry(_ShellGuard(self.registry))
                if kept != ops:
                    builder = builder.with_module_ops(kept)
            t = time.perf_counter()
            model = original(builder, device, dtype, **kwargs)
            model = hooks._finish(model, time.perf_counter() - t, _device_of(model, device))
            if key is not None and is_ltx_model(model) and getattr(model, MARK, False) and _fits(model):
                hooks.let_go()
                hooks.kept = (key, model)
            return model
        build.__wrapped__ = original
        return build

    def let_go(self) -> None:
        """Release the kept DiT's weights as LTX-2 would have after its stage (`dispose`: storage to
        meta; LTX-2's registry still holds the shell, which the shell guard never hands out)."""
        if self.kept is not None:
            model, self.kept = self.kept[1], None
            release_loop_graphs(model)
            if hasattr(model, "dispose"):
                model.dispose()

    def _wrap_dispose(self, original):
        hooks = self

        def dispose(self):
            if hooks.kept is not None and getattr(self, "velocity_model", None) is hooks.kept[1]:
                return  # kept on the device for the run's next stage
            release_loop_graphs(self)  # compile.capture's graphs: LTX-2's registry keeps the disposed shell
            return original(self)
        dispose.__wrapped__ = original
        return dispose

    def _wrap_streaming(self, original):
        hooks = self

        def build(self, device=None, dtype=None, cpu_slots_count=None, gpu_slots_count=None, **kwargs):
            t = time.perf_counter()
            wrapper = original(self, device, dtype, cpu_slots_count, gpu_slots_count, **kwargs)
            inner = next((m for m in wrapper.modules() if is_ltx_model(m)), None)
            if inner is None:
                hooks._credit(Built(type(wrapper).__name__, hooks._stage_name(), time.perf_counter() - t))
                return wrapper
            hooks._finish_streamed(inner, time.perf_counter() - t, device)
            return wrapper
        build.__wrapped__ = original
        return build

    def _finish_streamed(self, inner, load_s: float, device) -> None:
        """A streamed DiT: LTX-2 owns its weights' placement (and, the flag policy says, its
        quantization and compile); ltx-tui installs the steps the policy left it."""
        from backends.runtime.apply import apply_profile

        import torch

        built = Built(type(inner).__name__, self._stage_name(), load_s, params=_params(inner))
        self._meter_steps(inner)
        if self.take_over:
            t = time.perf_counter()
            with inside_sp_wrappers(inner):
                built.report = apply_profile(inner, self._narrow(self.dit_steps), device=torch.device(device or "cuda"),
                                             place=False)
            built.apply_s = time.perf_counter() - t
        self._credit(built)

    def _meter_steps(self, model: nn.Module) -> None:
        """The step hook on `model`, once (LTX-2 as built hands the same shell to a second build)."""
        for old in getattr(model, STEP_HOOK, ()):
            old.remove()
        setattr(model, STEP_HOOK, (model.register_forward_pre_hook(forward_pre_hook(self.meter), with_kwargs=True),
                                   model.register_forward_hook(forward_hook(self.meter))))

    def _wrap_block(self, original, kind: str):
        hooks, meter = self, self.meter

        def __call__(self, *args, **kwargs):
            if kind in DECODES:
                hooks.let_go()  # no denoising after the decoders: the kept DiT's memory goes to them
            shape = {k: kwargs[k] for k in ("width", "height", "frames") if isinstance(kwargs.get(k), int)}
            stage = meter.begin(kind, **shape)
            stage.with_kept_dit = hooks.kept is not None and kind != "denoise"
            try:
                result = original(self, *args, **kwargs)
            finally:
                meter.pause(stage)
            if kind == "video_decode" and hasattr(result, "__next__"):
                return meter.iterate(stage, result)
            return result
        __call__.__wrapped__ = original
        return __call__

    @contextlib.contextmanager
    def installed(self):
        single = importlib.import_module("ltx_core.loader.single_gpu_model_builder").SingleGPUModelBuilder
        streaming = importlib.import_module("ltx_core.block_streaming.builder").StreamingModelBuilder
        x0 = importlib.import_module("ltx_core.model.transformer.model").X0Model
        blocks = importlib.import_module("ltx_pipelines.utils.blocks")
        sft = importlib.import_module("ltx_core.loader.sft_loader").SafetensorsStateDictLoader
        saved = [(single, "build", single.build), (streaming, "build", streaming.build), (x0, "dispose", x0.__dict__.get("dispose"))]
        saved += [(getattr(blocks, name), "__call__", getattr(blocks, name).__call__) for name, _ in BLOCKS]
        saved.append((sft, "load", sft.load))
        try:
            if self.take_over:
                sft.load = _wrap_load(sft.load)
            single.build = self._wrap_single(single.build)
            streaming.build = self._wrap_streaming(streaming.build)
            x0.dispose = self._wrap_dispose(x0.dispose)
            for name, kind in BLOCKS:
                cls = getattr(blocks, name)
                cls.__call__ = self._wrap_block(cls.__call__, kind)
            yield self
        finally:
            self.let_go()
            for owner, attr, value in saved:
                if value is None:
                    delattr(owner, attr)  # the inherited method shows through again
                else:
                    setattr(owner, attr, value)


def _wrap_load(original):
    """LTX-2's safetensors loader, reading onto a CUDA device through `pinned_load` (the same state
    dict; a file it does not read, or another device, goes through LTX-2's own)."""
    import torch

    from backends.launch import pinned_load

    def load(self, path, sd_ops, device=None):
        device = torch.device(device) if device is not None else None
        if device is not None and device.type == "cuda":
            state_dict_type = importlib.import_module("ltx_core.loader.primitives").StateDict
            try:
                return pinned_load.load(path if isinstance(path, list) else [path], sd_ops, device, state_dict_type)
            except pinned_load.Unreadable:
                pass
        return original(self, path, sd_ops, device)
    load.__wrapped__ = original
    return load


def _build_key(builder, device, dtype) -> tuple | None:
    """What makes two builds of one builder's model the same model (None: cannot tell)."""
    try:
        loras = tuple((str(x.path), float(x.strength), getattr(x.sd_ops, "name", None)) for x in builder.loras)
        return (str(builder.model_path), loras, getattr(builder.model_sd_ops, "name", None),
                tuple(op.name for op in builder.module_ops), getattr(builder, "_model_class_configurator", None),
                builder.fuse_rule, str(device), str(dtype))
    except (AttributeError, TypeError):
        return None


def _builds_ltx_model(builder) -> bool:
    configurator = getattr(builder, "_model_class_configurator", None)
    return getattr(configurator, "__name__", "").startswith("LTXModel")


def _fits(model: nn.Module) -> bool:
    """Whether keeping `model` between stages leaves most of its GPU's memory to the other models."""
    import torch

    device = _device_of(model, None)
    if device is None or device.type != "cuda":
        return True
    weights = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    return weights <= KEEP_FRACTION * torch.cuda.get_device_properties(device).total_memory


def _params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _device_of(model: nn.Module, asked):
    import torch

    for p in model.parameters():
        if p.device.type != "meta":
            return p.device
    return torch.device(asked) if asked is not None else None
