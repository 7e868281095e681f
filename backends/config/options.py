"""The option vocabulary of profile schema v1: enums, specs and the `Profile` type.

Pure data: no I/O, no torch. Names match LTX-2 / NATTEN / TurboDiffusion so a profile
maps 1:1 onto their flags.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1


class _Choice(str, enum.Enum):
    """A string enum whose str() is its value."""

    def __str__(self) -> str:
        return self.value


class DiffVAEMode(_Choice):
    CHUNKED_EAGER = "chunked_eager"
    CHUNKED_COMPILE = "chunked_compile"
    COMBINED_COMPILE = "combined_compile"
    BLACKWELL_DSL = "blackwell_dsl"


class NABackend(_Choice):
    AUTO = "auto"
    NATTEN = "natten"
    TRITON = "triton"
    EAGER_SDPA = "eager_sdpa"
    BLACKWELL_DSL = "blackwell_dsl"


class NattenKernel(_Choice):
    AUTO = "auto"
    CUTLASS = "cutlass-fna"
    HOPPER = "hopper-fna"
    BLACKWELL = "blackwell-fna"
    FLEX = "flex-fna"


class Attention(_Choice):
    AUTOMATIC = "automatic"
    PYTORCH = "pytorch"
    FA3 = "flash_attention_3"
    FA4 = "flash_attention_4"
    SDPA_CUDNN = "sdpa_cudnn"
    SDPA_FLASH = "sdpa_flash"
    SDPA_EFFICIENT = "sdpa_efficient"
    SDPA_MATH = "sdpa_math"
    MPS_SDPA = "mps_sdpa"


class Quantization(_Choice):
    NONE = "none"
    FP8_CAST = "fp8-cast"
    FP8_SCALED_MM = "fp8-scaled-mm"
    NVFP4_CAST = "nvfp4-cast"
    NVFP4_PREQUANT = "nvfp4-prequant"
    FP8_BLOCKWISE = "fp8-blockwise"
    INT8_W8A8 = "int8-w8a8"


class SparseAttention(_Choice):
    NONE = "none"
    SLA = "sla"
    SAGESLA = "sagesla"


class CompileMode(_Choice):
    DEFAULT = "default"
    REDUCE_OVERHEAD = "reduce-overhead"
    MAX_AUTOTUNE = "max-autotune"
    MAX_AUTOTUNE_NO_CUDAGRAPHS = "max-autotune-no-cudagraphs"


class CompileBackend(_Choice):
    INDUCTOR = "inductor"
    CUDAGRAPHS = "cudagraphs"
    AOT_EAGER = "aot_eager"
    EAGER = "eager"


class Dynamic(_Choice):
    AUTO = "auto"
    TRUE = "true"
    FALSE = "false"


class OffloadMode(_Choice):
    NONE = "none"
    CPU = "cpu"
    DISK = "disk"


@dataclass(frozen=True)
class DiffVAE:
    mode: DiffVAEMode = DiffVAEMode.CHUNKED_EAGER
    na_backend: NABackend = NABackend.AUTO
    natten_kernel: NattenKernel = NattenKernel.AUTO


@dataclass(frozen=True)
class Transformer:
    attention: Attention = Attention.AUTOMATIC
    quantization: Quantization = Quantization.NONE
    sparse_attention: SparseAttention = SparseAttention.NONE
    sla_topk: float = 0.1
    fast_norm: bool = False


@dataclass(frozen=True)
class Compile:
    enabled: bool = False
    mode: CompileMode = CompileMode.DEFAULT
    backend: CompileBackend = CompileBackend.INDUCTOR
    fullgraph: bool = False
    dynamic: Dynamic = Dynamic.AUTO
    capture: bool = False


@dataclass(frozen=True)
class Offload:
    mode: OffloadMode = OffloadMode.NONE
    gpu_slots: int = 2
    prefetch: int = 2


@dataclass(frozen=True)
class Memory:
    expandable_segments: bool = True
    max_batch_size: int = 1


@dataclass(frozen=True)
class Parallel:
    gpus: int = 1
    devices: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Generated:
    """Provenance written into a saved profile; not part of the profile's value."""

    tool_version: str
    time: str
    capability_fingerprint: str | None = None
    capability_source: str | None = None


@dataclass(frozen=True)
class Profile:
    diffvae: DiffVAE = field(default_factory=DiffVAE)
    transformer: Transformer = field(default_factory=Transformer)
    compile: Compile = field(default_factory=Compile)
    offload: Offload = field(default_factory=Offload)
    memory: Memory = field(default_factory=Memory)
    parallel: Parallel = field(default_factory=Parallel)
    generated: Generated | None = field(default=None, compare=False)

    def get(self, key: str) -> Any:
        """Value of a dotted option key, e.g. ``profile.get("compile.mode")``."""
        section, name = key.split(".")
        return getattr(getattr(self, section), name)

    def replace(self, **values: Any) -> Profile:
        """A copy with dotted keys changed: ``p.replace(**{"compile.mode": "max-autotune"})``.

        Choice values may be given as strings; device lists as any sequence.
        """
        sections: dict[str, dict[str, Any]] = {}
        for key, value in values.items():
            spec = OPTIONS_BY_KEY[key]
            if spec.choices is not None:
                value = spec.choices(value)
            elif spec.kind is Kind.DEVICES and value is not None:
                value = tuple(value)
            sections.setdefault(spec.section, {})[spec.name] = value
        return dataclasses.replace(
            self,
            **{s: dataclasses.replace(getattr(self, s), **v) for s, v in sections.items()},
        )


class Kind(str, enum.Enum):
    CHOICE = "choice"
    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    DEVICES = "devices"


@dataclass(frozen=True)
class OptionSpec:
    """One option of the vocabulary: key, type, default, allowed values and a line of help."""

    key: str
    kind: Kind
    help: str
    choices: type[_Choice] | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    optional: bool = False

    @property
    def section(self) -> str:
        return self.key.split(".")[0]

    @property
    def name(self) -> str:
        return self.key.split(".")[1]

    @property
    def default(self) -> Any:
        return Profile().get(self.key)

    def allowed(self) -> str:
        """What values are allowed, in words."""
        if self.choices is not None:
            return "one of " + ", ".join(repr(c.value) for c in self.choices)
        if self.kind is Kind.BOOL:
            return "true or false"
        if self.kind is Kind.DEVICES:
            return "a list of distinct CUDA ordinals (integers >= 0), e.g. [0, 1]"
        kind = "an integer" if self.kind is Kind.INT else "a number"
        lo = "" if self.minimum is None else (">" if self.exclusive_minimum else ">=") + f" {self.minimum:g}"
        hi = "" if self.maximum is None else f"<= {self.maximum:g}"
        return " ".join(x for x in (kind, lo, "and" if lo and hi else "", hi) if x)


def _choice(key: str, enum_type: type[_Choice], help: str) -> OptionSpec:
    return OptionSpec(key, Kind.CHOICE, help, choices=enum_type)


OPTIONS: tuple[OptionSpec, ...] = (
    _choice("diffvae.mode", DiffVAEMode, "How the DiffVAE decoder runs: chunked or combined, eager or compiled."),
    _choice("diffvae.na_backend", NABackend, "Kernel family for the decoder's 3D neighborhood attention."),
    _choice("diffvae.natten_kernel", NattenKernel, "Which NATTEN kernel, when the NA backend is natten."),
    _choice("transformer.attention", Attention, "Dense attention kernel of the DiT transformer."),
    _choice("transformer.quantization", Quantization, "Weight (and activation) quantization of the transformer's linears."),
    _choice("transformer.sparse_attention", SparseAttention, "TurboDiffusion sparse-linear attention in the transformer."),
    OptionSpec("transformer.sla_topk", Kind.FLOAT, "Fraction of blocks kept by sparse attention.",
               minimum=0.0, maximum=1.0, exclusive_minimum=True),
    OptionSpec("transformer.fast_norm", Kind.BOOL, "Fused normalisation kernels in the transformer."),
    OptionSpec("compile.enabled", Kind.BOOL, "torch.compile the transformer blocks."),
    _choice("compile.mode", CompileMode, "torch.compile mode; reduce-overhead and max-autotune use CUDA graphs."),
    _choice("compile.backend", CompileBackend, "torch.compile backend."),
    OptionSpec("compile.fullgraph", Kind.BOOL, "Fail instead of splitting graphs at unsupported code."),
    _choice("compile.dynamic", Dynamic, "Dynamic shapes: auto lets torch decide."),
    OptionSpec("compile.capture", Kind.BOOL, "Capture CUDA graphs of the compiled blocks."),
    _choice("offload.mode", OffloadMode, "Keep weights in CPU memory or on disk and stream them in."),
    OptionSpec("offload.gpu_slots", Kind.INT, "GPU buffers that hold streamed blocks.", minimum=1),
    OptionSpec("offload.prefetch", Kind.INT, "Blocks fetched ahead of compute.", minimum=0),
    OptionSpec("memory.expandable_segments", Kind.BOOL, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."),
    OptionSpec("memory.max_batch_size", Kind.INT, "Largest batch the pipeline runs at once.", minimum=1),
    OptionSpec("parallel.gpus", Kind.INT, "GPUs for sequence parallelism.", minimum=1),
    OptionSpec("parallel.devices", Kind.DEVICES, "CUDA ordinals to use (default: the first `gpus`).", optional=True),
)

OPTIONS_BY_KEY: dict[str, OptionSpec] = {o.key: o for o in OPTIONS}
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(o.section for o in OPTIONS))
