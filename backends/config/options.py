"""The option vocabulary of profile schema v1: enums, specs and the `Profile` type.

Pure data: no I/O, no torch. Names match LTX-2 / NATTEN / TurboDiffusion so a profile
maps 1:1 onto their flags.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import json
import math
from dataclasses import dataclass, field
from typing import Any

from backends.config.ltx2_shapes import MAX_BATCH
from backends.machine.capability import MAX_GPUS
from backends.machine.text import printable

SCHEMA_VERSION = 1
MAX_SHOWN = 60  # a value quoted in a message is cut to this many characters


class _Choice(str, enum.Enum):
    """A string enum whose str() is its value."""

    def __str__(self) -> str:
        return self.value

    def plain(self) -> Any:
        """The value as TOML and JSON hold it."""
        return self.value


class DiffVAEMode(_Choice):
    AUTO = "auto"
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
    SDPA_CUDNN_FP8 = "sdpa_cudnn_fp8"
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


class QuantizationScope(_Choice):
    LTX2_BLOCKS = "ltx2-blocks"
    ALL_LINEARS = "all-linears"


class SparseAttention(_Choice):
    NONE = "none"
    SLA = "sla"
    SAGESLA = "sagesla"


class CompileEnabled(_Choice):
    """compile.enabled: `true` / `false` as TOML booleans, or "auto"."""

    AUTO = "auto"
    TRUE = "true"
    FALSE = "false"

    def plain(self) -> Any:
        return {"true": True, "false": False}.get(self.value, self.value)


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
    mode: DiffVAEMode = DiffVAEMode.AUTO
    na_backend: NABackend = NABackend.AUTO
    natten_kernel: NattenKernel = NattenKernel.AUTO


@dataclass(frozen=True)
class Transformer:
    attention: Attention = Attention.AUTOMATIC
    quantization: Quantization = Quantization.NONE
    quantization_scope: QuantizationScope = QuantizationScope.LTX2_BLOCKS
    sparse_attention: SparseAttention = SparseAttention.NONE
    sla_topk: float = 0.1
    fast_norm: bool = False


@dataclass(frozen=True)
class Compile:
    enabled: CompileEnabled = CompileEnabled.AUTO
    mode: CompileMode = CompileMode.DEFAULT
    backend: CompileBackend = CompileBackend.INDUCTOR
    fullgraph: bool = False
    dynamic: Dynamic = Dynamic.AUTO
    capture: bool = False

    KEYS = ("mode", "backend", "fullgraph", "dynamic", "capture")  # LTX-2's --compile KEY=VALUE keys

    def ltx2_flag(self) -> list[str]:
        """LTX-2's `--compile [KEY=VALUE ...]` for this section: the keys that differ from its defaults."""
        return ["--compile", *(f"{k}={str(getattr(self, k)).lower()}" for k in self.KEYS
                               if getattr(self, k) != getattr(Compile(), k))]


@dataclass(frozen=True)
class Offload:
    mode: OffloadMode = OffloadMode.NONE
    gpu_slots: int = 2
    prefetch: int = 1  # gpu_slots - 1: one slot holds the block being computed


@dataclass(frozen=True)
class Memory:
    expandable_segments: bool = True
    max_batch_size: int = 1


@dataclass(frozen=True)
class Parallel:
    gpus: int = 1
    devices: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.devices is not None and len(self.devices) != self.gpus:
            raise InvalidValue("parallel.devices", f"lists {len(self.devices)} device(s) but parallel.gpus = "
                               f"{self.gpus}", "make parallel.gpus equal the number of devices, or drop parallel.devices")

    @property
    def ordinals(self) -> tuple[int, ...]:
        """The CUDA ordinals the run uses: `devices`, else the first `gpus`."""
        return tuple(self.devices or range(self.gpus))


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

        Every value is checked by its spec (choices as strings or enums, device lists as any
        sequence) and the result by the profile's invariants; raises `InvalidValue`.
        """
        sections: dict[str, dict[str, Any]] = {}
        for key, value in values.items():
            if key not in OPTIONS_BY_KEY:
                raise InvalidValue(key, "unknown option", suggest(key, list(OPTIONS_BY_KEY)))
            spec = OPTIONS_BY_KEY[key]
            sections.setdefault(spec.section, {})[spec.name] = spec.convert(value)
        return dataclasses.replace(
            self,
            **{s: dataclasses.replace(getattr(self, s), **v) for s, v in sections.items()},
        )


class InvalidValue(ValueError):
    """A value an option does not allow, or a profile that breaks an invariant."""

    def __init__(self, key: str, problem: str, hint: str | None = None) -> None:
        self.key, self.problem, self.hint = key, problem, hint
        super().__init__(f"{key}: {problem}" + (f" ({hint})" if hint else ""))


def suggest(word: str, choices: list[str]) -> str | None:
    """A "did you mean" hint for a misspelt word, or None. A word that begins several choices names
    them all ('sdpa': 'sdpa_cudnn', 'sdpa_flash', ...), not the closest by letters ('mps_sdpa')."""
    same = [c for c in choices if c.lower() == word.lower() and c != word]
    if same:  # "FP8-CAST": only the case is wrong
        return f"did you mean {same[0]!r}?"
    starting = [c for c in choices if c.startswith(word) and c != word] if word else []
    if len(starting) > 1:
        return f"did you mean one of {', '.join(map(repr, starting))}?"
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    close = close or starting
    close = close or difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    return f"did you mean {close[0]!r}?" if close else None


def _unquoted(value: Any, kind: "Kind") -> str | None:
    """A hint for a number written as a string ("0.5"): write it without the quotes."""
    if not isinstance(value, str):
        return None
    try:
        number = int(value) if kind is Kind.INT else float(value)
    except ValueError:
        return None
    return f"write {value.strip()} without quotes" if math.isfinite(number) else None


def type_name(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            tuple: "an array", dict: "a table"}.get(type(value), type(value).__name__)


def show_value(value: Any) -> str:
    """An option value as the user writes it: `-` for none, `true`, `0,1`, `0.1`."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def toml_value(value: Any) -> str:
    """An option value as TOML writes it: `"triton"`, `true`, `[0, 1]`, `0.1`; `-` for none."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, _Choice) and not isinstance(value.plain(), str):
        return toml_value(value.plain())
    if isinstance(value, (int, float)):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return '"' + str(value.value if isinstance(value, enum.Enum) else value).replace('"', '\\"') + '"'


class Kind(str, enum.Enum):
    CHOICE = "choice"
    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    DEVICES = "devices"


@dataclass(frozen=True)
class OptionSpec:
    """One option: key, type, allowed values, help, and where it goes.

    `rules`: the ids of the rules (backends.config.rules) that can decide it; `runtime`: what
    ltx-tui's runtime does with it; `flag`: the ltx-pipelines v1.2.0 flag or variable (None:
    LTX-2 has none).
    """

    key: str
    kind: Kind
    help: str
    choices: type[_Choice] | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    optional: bool = False
    rules: tuple[str, ...] = ()
    runtime: str = ""
    flag: str | None = None

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
        if self.choices is CompileEnabled:
            return 'true, false or "auto"'
        if self.choices is not None:
            return "one of " + ", ".join(repr(c.value) for c in self.choices)
        if self.kind is Kind.BOOL:
            return "true or false"
        if self.kind is Kind.DEVICES:
            return f"a list of distinct CUDA ordinals (integers from 0 to {MAX_GPUS - 1}), e.g. [0, 1]"
        kind = "an integer" if self.kind is Kind.INT else "a number"
        lo = "" if self.minimum is None else (">" if self.exclusive_minimum else ">=") + f" {self.minimum:g}"
        hi = "" if self.maximum is None else f"<= {self.maximum:g}"
        return " ".join(x for x in (kind, lo, "and" if lo and hi else "", hi) if x)

    def convert(self, value: Any) -> Any:
        """`value` as this option's type, checked; raises InvalidValue saying what is allowed."""
        def bad(problem: str, hint: str | None = None):
            raise InvalidValue(self.key, problem, hint)

        raw = value.value if isinstance(value, enum.Enum) else list(value) if isinstance(value, tuple) else value
        shown = "a table" if isinstance(value, dict) else printable(json.dumps(raw, ensure_ascii=False, default=str))
        shown = shown if len(shown) <= MAX_SHOWN else shown[:MAX_SHOWN - 3] + "..."
        if self.kind is Kind.CHOICE:
            if isinstance(value, self.choices):
                return value
            if isinstance(value, bool) and {"true", "false"} <= {c.value for c in self.choices}:
                value = "true" if value else "false"
            if not isinstance(value, str):
                bad(f"expected {self.allowed()}, found {type_name(value)} {shown}")
            try:
                return self.choices(value)
            except ValueError:
                bad(f"{shown} is not allowed; expected {self.allowed()}", suggest(value, [c.value for c in self.choices]))
        if self.kind is Kind.BOOL:
            if not isinstance(value, bool):
                hint = f"write {str(value).lower()} without quotes" if str(value).lower() in ("true", "false") else None
                bad(f"expected true or false, found {type_name(value)} {shown}", hint)
            return value
        if self.kind is Kind.DEVICES:
            if value is None:
                return None
            if not isinstance(value, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool)
                                                                for d in value):
                bad(f"expected {self.allowed()}, found {shown}")
            if any(d < 0 for d in value):
                bad(f"negative CUDA ordinal in {shown}; expected {self.allowed()}")
            if any(d >= MAX_GPUS for d in value):
                bad(f"CUDA ordinal {max(value)} is out of range; expected {self.allowed()}",
                    f"a capability describes at most {MAX_GPUS} GPUs")
            if len(set(value)) != len(value):
                bad(f"duplicate CUDA ordinal in {shown}; each GPU may appear once")
            if not value:
                bad("empty device list; omit parallel.devices to use the first `gpus` ordinals")
            return tuple(value)
        numeric = (int,) if self.kind is Kind.INT else (int, float)
        if isinstance(value, bool) or not isinstance(value, numeric):
            bad(f"expected {self.allowed()}, found {type_name(value)} {shown}", _unquoted(value, self.kind))
        if isinstance(value, float) and not math.isfinite(value):
            bad(f"expected {self.allowed()}, found {shown}")
        too_low = self.minimum is not None and (value <= self.minimum if self.exclusive_minimum else value < self.minimum)
        too_high = self.maximum is not None and value > self.maximum
        if too_low or too_high:
            bad(f"{shown} is out of range; expected {self.allowed()}")
        return float(value) if self.kind is Kind.FLOAT else value


def _choice(key: str, enum_type: type[_Choice], help: str, **kw: Any) -> OptionSpec:
    return OptionSpec(key, Kind.CHOICE, help, choices=enum_type, **kw)


_NA = "installs an NAFunction on every module with attention_function and kernel_size"
_COMPILE = "torch.compile per transformer block"
_OFFLOAD = "streams each transformer block's weights from host memory"
_PIPELINE = "nothing in ltx-tui's runtime; left to the LTX-2 pipeline"
_TURBO = ("nothing: TurboDiffusion's scripts run it, neither LTX-2 v1.2.0's pipelines nor ltx-tui's runtime; "
          "the runtime and ltx-tui run refuse a value other than none")

OPTIONS: tuple[OptionSpec, ...] = (
    _choice("diffvae.mode", DiffVAEMode, "How the DiffVAE decoder runs: chunked or combined, eager or compiled.",
            rules=("diffvae.compile-off", "diffvae.combined-needs-natten", "diffvae.blackwell-dsl"),
            runtime="lays out LTX-2's DiffusionVideoDecoder with LTX-2's own apply_diffvae_config, compiled or not",
            flag="--diffvae-optimization MODE"),
    _choice("diffvae.na_backend", NABackend, "Kernel family for the decoder's 3D neighborhood attention.",
            rules=("natten.usable", "triton.na", "diffvae.dsl-pair", "diffvae.blackwell-dsl"), runtime=_NA),
    _choice("diffvae.natten_kernel", NattenKernel, "Which NATTEN kernel, when the NA backend is natten.",
            rules=("natten.usable", "natten.flex-slow"), runtime=_NA + " (natten:KERNEL)"),
    _choice("transformer.attention", Attention, "Dense attention kernel of the DiT transformer.",
            rules=("attention.fa3", "attention.fa4", "attention.sdpa_cudnn", "attention.cudnn_fp8", "attention.sdpa_flash",
                   "attention.sdpa_efficient", "attention.mps"),
            runtime="installs a DenseFunction on every module with attention_function and heads"),
    _choice("transformer.quantization", Quantization,
            "Weight (and activation) quantization of the transformer's linears.",
            rules=("quant.fp8-scaled-mm", "quant.nvfp4", "quant.loader-only", "quant.runs", "quant.fp8-blockwise",
                   "quant.int8-w8a8", "parallel.ignores-quant-offload"),
            runtime="replaces the nn.Linear in scope with quantized linears",
            flag="--quantization METHOD (omitted for none; fp8-cast, fp8-scaled-mm, nvfp4-* only)"),
    _choice("transformer.quantization_scope", QuantizationScope,
            "Which linears are quantized: LTX-2's block linears (as its fp8-cast), or every nn.Linear.",
            runtime="selects the linears the quantization replaces"),
    _choice("transformer.sparse_attention", SparseAttention, "TurboDiffusion sparse-linear attention in the transformer.",
            rules=("sparse.runs", "sparse.sla", "sparse.sagesla"), runtime=_TURBO),
    OptionSpec("transformer.sla_topk", Kind.FLOAT, "Fraction of blocks kept by sparse attention.",
               minimum=0.0, maximum=1.0, exclusive_minimum=True, runtime=_TURBO),
    OptionSpec("transformer.fast_norm", Kind.BOOL, "Fused normalisation kernels in the transformer.",
               runtime="installs one-pass AdaLN and post-attention norms (kernels.adaln) and q/k norm + RoPE "
                       "(kernels.dit_qk) in LTX-2's DiT blocks"),
    _choice("compile.enabled", CompileEnabled, "torch.compile the transformer blocks: true, false, or auto (the "
            "fastest measured for the run's length, compile time counted).", runtime=_COMPILE,
            rules=("parallel.compile-barrier",),
            flag="--compile [KEY=VALUE ...] (omitted when disabled)"),
    _choice("compile.mode", CompileMode, "torch.compile mode; reduce-overhead and max-autotune use CUDA graphs.",
            rules=("compile.cuda-graphs-cuda", "compile.cuda-graphs-single-gpu", "compile.cuda-graphs-streamed"),
            runtime=_COMPILE, flag="--compile mode=VALUE"),
    _choice("compile.backend", CompileBackend, "torch.compile backend.",
            rules=("compile.inductor-triton", "cuda.device"), runtime=_COMPILE, flag="--compile backend=VALUE"),
    OptionSpec("compile.fullgraph", Kind.BOOL, "Fail instead of splitting graphs at unsupported code.",
               runtime=_COMPILE, flag="--compile fullgraph=VALUE"),
    _choice("compile.dynamic", Dynamic, "Dynamic shapes: auto lets torch decide.", rules=("compile.dynamic",),
            runtime=_COMPILE, flag="--compile dynamic=VALUE"),
    OptionSpec("compile.capture", Kind.BOOL, "Capture CUDA graphs: LTX-2's whole block loop, one graph per "
               "input shape (one graph per block on other compiled models); with compile.enabled = false the "
               "loop of eager blocks.",
               rules=("compile.cuda-graphs-cuda", "compile.cuda-graphs-single-gpu", "compile.cuda-graphs-streamed"),
               runtime="CUDA graphs of LTX-2's block loop, its blocks compiled or (compile off) eager",
               flag="--compile capture=VALUE (compiled blocks; LTX-2 has no flag for the eager capture)"),
    _choice("offload.mode", OffloadMode, "Keep weights in CPU memory or on disk and stream them in.",
            rules=("cuda.device", "offload.loader-quantization", "offload.quantization", "parallel.ignores-quant-offload"),
            runtime=_OFFLOAD,
            flag="--offload MODE"),
    OptionSpec("offload.gpu_slots", Kind.INT, "GPU buffers that hold streamed blocks (1 to 64; LTX-2's DiT has 48 "
               "blocks, so from 48 slots every block stays resident).", minimum=1, maximum=64, runtime=_OFFLOAD),
    OptionSpec("offload.prefetch", Kind.INT, "Blocks fetched ahead of compute (0 to 64; at most gpu_slots - 1 are "
               "in flight).", minimum=0, maximum=64, runtime=_OFFLOAD),
    OptionSpec("memory.expandable_segments", Kind.BOOL, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
               runtime="sets PYTORCH_CUDA_ALLOC_CONF (apply_env, before CUDA initialises)",
               flag="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
    OptionSpec("memory.max_batch_size", Kind.INT, f"Largest batch the pipeline runs at once (1 to {MAX_BATCH}).",
               minimum=1, maximum=MAX_BATCH, runtime=_PIPELINE, flag="--max-batch-size N (read by some pipeline modules only)"),
    OptionSpec("parallel.gpus", Kind.INT, f"GPUs for sequence parallelism (1 to {MAX_GPUS}, the most a capability "
               "describes).", minimum=1, maximum=MAX_GPUS,
               rules=("parallel.gpu-count", "parallel.heads", "parallel.max-peers", "parallel.linux", "parallel.nccl",
                      "parallel.all2all", "parallel.all2all-arch", "parallel.all2all-unverified", "parallel.peer-access",
                      "parallel.peer-access-unverified", "parallel.sp-tokens"),
               runtime=_PIPELINE, flag="python -m ltx_pipelines.<module>_mgpu (with CUDA_VISIBLE_DEVICES)"),
    OptionSpec("parallel.devices", Kind.DEVICES, "CUDA ordinals to use (default: the first `gpus`).", optional=True,
               rules=("parallel.devices",), runtime=_PIPELINE, flag="CUDA_VISIBLE_DEVICES"),
)

OPTIONS_BY_KEY: dict[str, OptionSpec] = {o.key: o for o in OPTIONS}
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(o.section for o in OPTIONS))
