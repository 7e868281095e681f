"""Time and peak GPU memory per stage of an LTX-2 run, and per denoising step.

Stages may overlap (LTX-2's video decoder is a lazy iterator: it is built, then the audio
decoder runs, then the video is decoded chunk by chunk as the file is written), so the meter
works in intervals: at every stage boundary it synchronises the GPU, reads the peak memory since
the last boundary, resets it, and credits the interval's time and peak to every stage active in
it. Each stage's seconds are therefore GPU-complete, and its peak is the largest allocation seen
while it was active.

Denoising steps: a forward pre-hook on every LTXModel the run builds notes the step (the video
modality's sigma; guidance makes several forwards per step); a step's seconds run from its first
forward to the next step's first forward, the last step's to the end of its last forward.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator

import torch

GIB = float(1 << 30)

STAGE_NAMES = {"text_encoder": "text encoding", "image_condition": "image conditioning", "denoise": "denoising",
               "upsample": "upsampling", "video_decode": "video decode", "audio_decode": "audio decode"}


@dataclass
class Stage:
    kind: str
    name: str
    seconds: float = 0.0
    calls: int = 0
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    shape: dict[str, int] = field(default_factory=dict)  # denoise: width, height, frames
    step_marks: list[float] = field(default_factory=list)  # meter time of each step's first forward
    step_end: float | None = None
    forwards: int = 0
    tokens: int | None = None
    last_sigma: float | None = None
    load_s: float = 0.0
    apply_s: float = 0.0
    with_kept_dit: bool = False  # a DiT kept for a later stage was on the device during this stage

    def step_seconds(self) -> list[float]:
        marks = self.step_marks + ([self.step_end] if self.step_end is not None else [])
        return [round(b - a, 6) for a, b in zip(marks, marks[1:])]


class Meter:
    """Stages of one run, in the order they started."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.cuda = device is not None and device.type == "cuda" and torch.cuda.is_available()
        self.device = device
        self.stages: list[Stage] = []
        self.active: list[Stage] = []
        self.clock = 0.0  # seconds credited so far (meter time)
        self._t = time.perf_counter()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(device)

    def _boundary(self) -> None:
        if self.cuda:
            try:
                torch.cuda.synchronize(self.device)
            except RuntimeError:  # a device error (illegal address...): the run's own exception says it
                self.cuda = False
        now = time.perf_counter()
        dt, self._t = now - self._t, now
        self.clock += dt
        peak = reserved = None
        if self.cuda:
            try:
                peak = torch.cuda.max_memory_allocated(self.device)
                reserved = torch.cuda.max_memory_reserved(self.device)
                torch.cuda.reset_peak_memory_stats(self.device)
            except RuntimeError:
                self.cuda, peak, reserved = False, None, None
        for s in self.active:
            s.seconds += dt
            if peak is not None:
                s.peak_allocated = max(s.peak_allocated or 0, peak)
                s.peak_reserved = max(s.peak_reserved or 0, reserved)

    def begin(self, kind: str, **shape: int) -> Stage:
        """A new stage (numbered when its kind repeats: "denoising 1", "denoising 2")."""
        self._boundary()
        same = [s for s in self.stages if s.kind == kind]
        name = STAGE_NAMES.get(kind, kind)
        if kind == "denoise":
            name = f"{name} {len(same) + 1}"
        elif same:
            name = f"{name} {len(same) + 1}"
            if len(same) == 1 and not same[0].name[-1].isdigit():
                same[0].name += " 1"
        stage = Stage(kind, name, shape=dict(shape))
        self.stages.append(stage)
        self.resume(stage, boundary=False)
        return stage

    def resume(self, stage: Stage, *, boundary: bool = True) -> None:
        if boundary:
            self._boundary()
        stage.calls += 1
        self.active.append(stage)

    def pause(self, stage: Stage) -> None:
        self._boundary()
        if stage in self.active:
            self.active.remove(stage)

    def iterate(self, stage: Stage, chunks: Iterator) -> Iterator:
        """`chunks` with the stage active only while a chunk is being produced."""
        iterator = iter(chunks)
        while True:
            self.resume(stage)
            try:
                chunk = next(iterator)
            except StopIteration:
                return
            finally:
                self.pause(stage)
            yield chunk

    def forward(self, sigma: float | None, tokens: int | None) -> None:
        """A transformer forward began in the innermost active denoising stage."""
        stage = next((s for s in reversed(self.active) if s.kind == "denoise"), None)
        if stage is None:
            return
        stage.forwards += 1
        stage.tokens = tokens if tokens is not None else stage.tokens
        if not stage.step_marks or sigma != stage.last_sigma:
            stage.step_marks.append(self._now())
            stage.last_sigma = sigma

    def forward_done(self) -> None:
        """A transformer forward ended: the latest step ends here unless another forward follows."""
        stage = next((s for s in reversed(self.active) if s.kind == "denoise"), None)
        if stage is not None and stage.step_marks:
            stage.step_end = self._now()

    def _now(self) -> float:
        """Meter time now, the GPU's queued work included."""
        if self.cuda:
            try:
                torch.cuda.synchronize(self.device)
            except RuntimeError:
                self.cuda = False
        return self.clock + time.perf_counter() - self._t


def forward_hook(meter: Meter):
    """A forward hook for LTXModel: where the step's work ends."""
    def hook(module, args, output):
        meter.forward_done()
    return hook


def forward_pre_hook(meter: Meter):
    """A forward pre-hook for LTXModel (with kwargs): the step's sigma and token count."""
    def hook(module, args, kwargs):
        video = kwargs.get("video", args[0] if args else None)
        audio = kwargs.get("audio", args[1] if len(args) > 1 else None)
        sigma = tokens = None
        for modality in (video, audio):  # audio-only pipelines (t2a) step by the audio's sigma
            s = getattr(modality, "sigma", None)
            if isinstance(s, torch.Tensor) and s.numel():
                sigma = float(s.flatten()[0])
                break
        latent = getattr(video, "latent", None)
        if isinstance(latent, torch.Tensor) and latent.dim() == 3:
            tokens = int(latent.shape[1])
        meter.forward(sigma, tokens)
    return hook
