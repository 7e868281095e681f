"""What `--tune` times: every value of each speed option that resolves runnable here.

A value is a candidate when the profile with that value pinned (and compile enabled, for
compile.mode) resolves to exactly that value here (ok or warning: runnable by ltx-tui's runtime). `diffvae.na_backend = natten` is one
candidate per NATTEN kernel that runs here (`natten:hopper-fna`), since the kernel decides its
speed. An option whose first call compiles (`run_length.UNIT`), and in the default set any option,
is timed only where two of its values can be: one alone leaves `auto` nothing to choose (on an H200
without NATTEN, the Triton NA alone took 25 s of the 150 s budget; `--options` still times it). What
is not timed is listed as skipped, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.config import values
from backends.config.options import OPTIONS_BY_KEY, NattenKernel, Profile, show_value
from backends.config.plan import first_device, resolve
from backends.config.rules import Facts, Status, natten_kernel_check
from backends.config.run_length import UNIT
from backends.machine.capability import Capability
from backends.machine.tuned import Tuned

# The options whose values change speed, cheapest to time first. compile.enabled and diffvae.mode
# build and compile real LTX-2 modules (a DiT block pair, the full-size decoder); compile.mode
# compiles the blocks once per mode, so it is timed on request only.
OPTIONS = ("diffvae.na_backend", "transformer.attention", "transformer.quantization", "compile.enabled",
           "compile.mode", "diffvae.mode")
DEFAULT_OPTIONS = tuple(o for o in OPTIONS if o != "compile.mode")
ALONE = "the only value of this option"  # how the reason of a value left untimed alone starts
NOT_VALUES = {"auto", "automatic"}
# Values that would only burn the budget: a reason instead of a timing.
_CPU_COMPILE = ("on a CPU Inductor compiles C++ for minutes at LTX-2's full-size modules, over the tune's budget; "
                "auto keeps its prior here")
SLOW = {("diffvae.na_backend", "natten:flex-fna", True): "flex-fna materialises every score: 100x+ slower than "
        "the fused kernels at DiffVAE shapes (rule natten.flex-slow); auto never picks it on CUDA",
        ("compile.enabled", "true", False): _CPU_COMPILE, ("diffvae.mode", "chunked_compile", False): _CPU_COMPILE,
        ("diffvae.mode", "combined_compile", False): _CPU_COMPILE}


def timed_compiled(tuned: Tuned) -> bool:
    """Whether the tune that made `tuned` could time the compiled values (not on a CPU, where it leaves them out)."""
    return not any(c.status == "skipped" and c.reason == _CPU_COMPILE for c in tuned.candidates)


# Values the default set leaves out (`--options diffvae.mode` or `all` times them).
NOT_BY_DEFAULT = {("diffvae.mode", "combined_compile"): "not in the default set: on the H200 it decoded slower than "
                  "chunked_compile at 1.7x its decode memory (bench/RESULTS.md, \"bench/ltx2_decode.py\"); "
                  "--options diffvae.mode times it"}
# Values the default set leaves out on CUDA: far slower there, or a stand-in for a faster value.
NOT_BY_DEFAULT_CUDA = {("transformer.attention", "sdpa_math"): "not in the default set on CUDA: the math path "
                       "materialises every score (25x cuDNN's time at the DiT's attention on the H200); "
                       "--options transformer.attention times it",
                       ("transformer.attention", "sdpa_cudnn_fp8"): "not in the default set: fp8 attention changes "
                       "the result as a quantization does (rel L2 6e-2 per attention, against 2e-3 for bf16 cuDNN), "
                       "so a profile has to ask for it; --options transformer.attention times it"}
# Values the default set leaves out where a value never slower is timed: (that value, why, the SM
# generation this was measured on, or None: any GPU).
LEFT_FOR = {("transformer.quantization", "int8-w8a8"): ("fp8-scaled-mm", "not in the default set where "
            "fp8-scaled-mm runs: int8-w8a8 stands in for it on GPUs without fp8 (on the H200 it was the slower "
            "of the two); --options transformer.quantization times it", None),
            ("diffvae.na_backend", "eager_sdpa"): ("triton", "not in the default set where the Triton kernel runs: "
            "the tiled eager SDPA fallback stands in for it where Triton cannot run (on the H200 it took 80x the "
            "Triton kernel's time, 11 s of the tune); --options diffvae.na_backend times it", None),
            ("transformer.quantization", "fp8-cast"): ("none", "not in the default set where none runs: fp8-cast "
            "upcasts each fp8 weight to bf16 for the same GEMMs as none, so it is never the faster of the two "
            "(205 against 158 ms a DiT block pair on the H100 and the H200); it halves the weights' memory, which "
            "a profile asks for by naming it; --options transformer.quantization times it", None),
            ("transformer.attention", "sdpa_flash"): ("sdpa_cudnn", "not in the default set on Hopper where cuDNN's "
            "attention runs: SDPA's flash kernel took 1.9x its time at the DiT's attention (82 against 44 ms, "
            "H100 and H200); --options transformer.attention times it", 9),
            ("transformer.attention", "sdpa_efficient"): ("sdpa_cudnn", "not in the default set on Hopper where "
            "cuDNN's attention runs: SDPA's memory-efficient kernel took 3.9x its time at the DiT's attention "
            "(170 against 44 ms, H100 and H200); --options transformer.attention times it", 9),
            ("transformer.attention", "pytorch"): ("sdpa_cudnn", "not in the default set on Hopper where cuDNN's "
            "attention runs: plain PyTorch attention is SDPA's own choice among the kernels the sdpa_* values "
            "pin, within 5% of sdpa_cudnn there (43-47 ms each, H100 and H200, trading places between runs); "
            "--options transformer.attention times it", 9)}


@dataclass(frozen=True)
class Spec:
    """One candidate to time: `option` = `value`, on `device`."""

    option: str
    value: str
    device: str


def candidates(profile: Profile, cap: Capability, options: tuple[str, ...] = DEFAULT_OPTIONS
               ) -> tuple[list[Spec], list[tuple[str, str, str]]]:
    """(the candidates to time, [(option, value, why it is not timed)])."""
    unknown = [o for o in options if o not in OPTIONS]
    if unknown:
        raise ValueError(f"cannot tune {', '.join(unknown)}; tunable options: {', '.join(OPTIONS)}")
    device = first_device(profile, cap)  # where the smoke checks and the runtime put the model
    specs: list[Spec] = []
    skipped: list[tuple[str, str, str]] = []
    for option in options:
        first = len(specs)
        for value in OPTIONS_BY_KEY[option].choices:
            value = value.value
            if value in NOT_VALUES:
                continue
            if not values.value(option, value).tuned:
                skipped.append((option, value, f"not timed: {values.value(option, value).text}"))
                continue
            if options == DEFAULT_OPTIONS and (option, value) in NOT_BY_DEFAULT:
                skipped.append((option, value, NOT_BY_DEFAULT[option, value]))
                continue
            if options == DEFAULT_OPTIONS and cap.cuda and (option, value) in NOT_BY_DEFAULT_CUDA:
                skipped.append((option, value, NOT_BY_DEFAULT_CUDA[option, value]))
                continue
            pin = {option: value, **({"compile.enabled": True} if option == "compile.mode" else {})}
            d = resolve(profile.replace(**pin), cap)[option]
            if d.status not in (Status.OK, Status.WARNING) or show_value(d.effective) != value:
                skipped.append((option, value, d.message or d.chain[-1].reason))
                continue
            if option == "diffvae.na_backend" and value == "natten":
                for kernel in NattenKernel:
                    if not values.value("diffvae.natten_kernel", kernel).tuned:  # auto: the others' choice
                        continue
                    check = natten_kernel_check(kernel, Facts(cap, profile))
                    name = f"natten:{kernel.value}"
                    why = (check.reason if not check.available else SLOW.get((option, name, cap.cuda)))
                    if why:
                        skipped.append((option, name, why))
                    else:
                        specs.append(Spec(option, name, device))
                continue
            if (option, value, cap.cuda) in SLOW:
                skipped.append((option, value, SLOW[option, value, cap.cuda]))
                continue
            specs.append(Spec(option, value, device))
        left_out = False
        if options == DEFAULT_OPTIONS:
            timed = {spec.value for spec in specs[first:]}
            sm = Facts(cap, profile).sm  # the GPU the profile runs on
            for spec in specs[first:]:
                faster, why, generation = LEFT_FOR.get((option, spec.value), (None, "", None))
                if faster in timed and (generation is None or (sm or (0, 0))[0] == generation):
                    specs.remove(spec)
                    skipped.append((option, spec.value, why))
                    left_out = True
        if len(specs) - first == 1 and (option in UNIT or options == DEFAULT_OPTIONS):
            alone = specs.pop()
            where = "the default set times here (the others above are left out of it)" if left_out else "that runs here"
            skipped.append((option, alone.value, f"{ALONE} {where}: auto has nothing to choose between, so it keeps "
                            f"its prior (--options {option} times {'them all' if left_out else 'it'})"))
    return specs, skipped
