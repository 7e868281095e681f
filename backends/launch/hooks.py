"""Where `ltx-tui run` meets LTX-2: wrappers on its builders and pipeline blocks.

Every model an LTX-2 v1.2.0 pipeline loads passes through one of two builders:
`SingleGPUModelBuilder.build` and, with `--offload`, `StreamingModelBuilder.build`. The wrapper
- takes LTX-2's `diffvae_mode_*` layout op off a DiffVAE decoder's builder (ltx-tui lays it out),
- hands the builder a registry that never returns a cached model shell ltx-tui has modified
  (LTX-2 reuses shells: distilled's second DiT build would get the first build's quantized
  linears with their buffers on the meta device),
- builds, then applies the plan's steps for that model (`apply_profile` with the plan narrowed to
  the steps the flag policy leaves to ltx-tui) and records load and apply seconds.
The pipeline blocks (`ltx_pipelines.utils.blocks`) are wrapped for the stage meter. Everything is
restored on exit; LTX-2's files are never edited.
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
from backends.launch.meter import Meter, forward_pre_hook
from backends.runtime.ltx2 import is_diffusion_decoder

MARK = "_ltx_tui_applied"  # set on every model the plan was applied to
STEP_HOOK = "_ltx_tui_step_hook"  # the handle of the step meter's hook on an LTXModel
LTX2_LAYOUT_OPS = ("diffvae_mode_", "cutlass_fna_diffusion_decoder", "compile_diffusion_decoder")
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

    @property
    def applied(self) -> bool:
        return self.report is not None


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
    built: list[Built] = field(default_factory=list)

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
            built.report = apply_profile(model, self._narrow(kinds), device=device)
            built.apply_s = time.perf_counter() - t
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
            builder = self
            if hooks.take_over:
                ops = tuple(self.module_ops)
                kept = tuple(op for op in ops if not op.name.startswith(LTX2_LAYOUT_OPS))
                builder = self.with_registry(_ShellGuard(self.registry))
                if kept != ops:
                    builder = builder.with_module_ops(kept)
            t = time.perf_counter()
            model = original(builder, device, dtype, **kwargs)
            return hooks._finish(model, time.perf_counter() - t, _device_of(model, device))
        build.__wrapped__ = original
        return build

    def _wrap_streaming(self, original):
        hooks = self

        def build(self, device=None, dtype=None, cpu_slots_count=None, gpu_slots_count=None, **kwargs):
            t = time.perf_counter()
            wrapper = original(self, device, dtype, cpu_slots_count, gpu_slots_count, **kwargs)
            inner = next((m for m in wrapper.modules() if is_ltx_model(m)), None)
            if inner is None:
                hooks._credit(Built(type(wrapper).__name__, hooks._stage_name(), time.perf_counter() - t))
                return wrapper
            hooks._finish_streamed(wrapper, inner, time.perf_counter() - t, device)
            return wrapper
        build.__wrapped__ = original
        return build

    def _finish_streamed(self, wrapper, inner, load_s: float, device) -> None:
        """A streamed DiT: LTX-2 owns its weights' placement; ltx-tui installs the rest it may."""
        from backends.runtime.apply import apply_profile

        import torch

        built = Built(type(inner).__name__, self._stage_name(), load_s, params=_params(inner))
        self._meter_steps(inner)
        if self.take_over:
            kinds = tuple(k for k in self.dit_steps if k == "dense_attention")
            t = time.perf_counter()
            built.report = apply_profile(inner, self._narrow(kinds), device=torch.device(device or "cuda"), place=False)
            built.apply_s = time.perf_counter() - t
        self._credit(built)

    def _meter_steps(self, model: nn.Module) -> None:
        """The step hook on `model`, once (LTX-2 as built hands the same shell to a second build)."""
        old = getattr(model, STEP_HOOK, None)
        if old is not None:
            old.remove()
        setattr(model, STEP_HOOK, model.register_forward_pre_hook(forward_pre_hook(self.meter), with_kwargs=True))

    def _wrap_block(self, original, kind: str):
        meter = self.meter

        def __call__(self, *args, **kwargs):
            shape = {k: kwargs[k] for k in ("width", "height", "frames") if isinstance(kwargs.get(k), int)}
            stage = meter.begin(kind, **shape)
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
        blocks = importlib.import_module("ltx_pipelines.utils.blocks")
        saved = [(single, "build", single.build), (streaming, "build", streaming.build)]
        saved += [(getattr(blocks, name), "__call__", getattr(blocks, name).__call__) for name, _ in BLOCKS]
        try:
            single.build = self._wrap_single(single.build)
            streaming.build = self._wrap_streaming(streaming.build)
            for name, kind in BLOCKS:
                cls = getattr(blocks, name)
                cls.__call__ = self._wrap_block(cls.__call__, kind)
            yield self
        finally:
            for owner, attr, value in saved:
                setattr(owner, attr, value)


def _params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _device_of(model: nn.Module, asked):
    import torch

    for p in model.parameters():
        if p.device.type != "meta":
            return p.device
    return torch.device(asked) if asked is not None else None
