"""The flag policy of `ltx-tui run`: the profile is authoritative over LTX-2's own speed flags.

LTX-2 v1.2.0's pipeline modules take five flags that the profile also sets: `--quantization`,
`--compile [KEY=VALUE ...]`, `--offload`, `--diffvae-optimization` and `--max-batch-size`
(ltx_pipelines/utils/args.py, `basic_arg_parser`). Given on the command line, each is compared
with the profile before anything loads: one that disagrees is a `FlagConflict` (exit 2, naming
both); one that agrees is taken over. Either way the flag never reaches LTX-2 as the user wrote
it: what LTX-2 must do itself is added back from the profile (`ltx_argv`), once:

- offload: LTX-2's own streaming builder realises `offload.mode` (`--offload MODE`); with it,
  LTX-2 also applies fp8-cast and compile at load (its streaming path applies them to the meta
  model; ltx-tui's runtime cannot replace the linears or blocks of a streamed model), so those go
  to LTX-2 as `--quantization fp8-cast` / `--compile ...` too;
- NVFP4 (`nvfp4-cast`, `nvfp4-prequant`) only LTX-2's loader applies: `--quantization` goes to it;
  (without CUDA graphs: the plan falls back to plain compile over streamed weights, and so does
  the flag);
- otherwise ltx-tui's runtime applies quantization, compile, the block-loop capture and fast_norm
  to the loaded DiT (dense attention and fast_norm under offload too), and its
  DiffVAE layout to the decoder (LTX-2's `diffvae_mode_*` op is taken off the decoder's builder;
  `--diffvae-optimization MODE` is still passed so LTX-2 sizes its decode tiles for that layout);
- `--max-batch-size N` is passed on when the profile's `memory.max_batch_size` is not 1 (LTX-2
  parses it everywhere; only some modules read it).

LTX-2's multi-GPU modules (`MGPU_MODULES`, `policy(..., multi_gpu=True)`) parse the same command
line but hand their workers only the compile config and the DiffVAE mode: `--quantization`,
`--offload`, `--lora` and `--max-batch-size` would be dropped without a word (every rank builds
the DiT fp8-cast, resident, without LoRAs). ltx-tui refuses them (`MGPU_DROPPED` says what would
happen), and refuses a profile that asks for another quantization or for offload. `--compile` and
`--diffvae-optimization` are judged as for one GPU; ltx-tui compiles the DiT in every rank.

The profile judged is the plan's (`Plan.pinned()`): `auto` of `diffvae.mode` and
`compile.enabled` is what the plan decided for this machine and run.

Pure: no torch, no LTX-2 imports.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace

from backends.config.options import Compile, CompileEnabled, CompileMode, OffloadMode, Profile, Quantization
from backends.config.rules import OFFLOAD_QUANTIZATIONS
from backends.config.run_length import UNIT
from backends.config.values import LOADER, value

FLAGS = ("--quantization", "--compile", "--offload", "--diffvae-optimization", "--max-batch-size")
# LTX-2's --compile keys that the profile has no option for.
COMPILE_EXTRA_KEYS = ("inductor_config", "dynamo_config", "seq_dim_dynamic", "recompile_perturbed_block")
MGPU_MODULES = ("ltx_pipelines.distilled_mgpu", "ltx_pipelines.ti2vid_two_stages_mgpu",
                "ltx_pipelines.ti2vid_two_stages_hq_mgpu")
# What LTX-2 v1.2.0's multi-GPU modules do with the flags they parse but never pass to their
# workers (their __main__ gives the runner's setup only the compile config and the DiffVAE mode;
# the runners build fp8-cast, with `loras=[]`, and never stream).
MGPU_DROPPED = {
    "--quantization": "LTX-2's multi-GPU modules never pass it to their ranks, which build the DiT fp8-cast "
                      "whatever it says",
    "--offload": "LTX-2's multi-GPU modules never pass it to their ranks: each holds the whole DiT on its GPU, "
                 "nothing is streamed",
    "--lora": "LTX-2's multi-GPU modules build their pipelines without LoRAs (loras=[]): the LoRA would be "
              "left out",
    "--max-batch-size": "LTX-2's multi-GPU modules never read it",
}


class FlagConflict(ValueError):
    """An LTX-2 flag on the command line disagrees with the profile (or cannot be read)."""


@dataclass(frozen=True)
class Verdict:
    flag: str  # as given, e.g. "--quantization fp8-cast"
    option: str  # the profile option it maps to
    verdict: str  # "agrees" | "conflicts"
    detail: str


# Plan steps ltx-tui applies to every DiT build; quantize, compile and capture unless LTX-2's own
# builder does what they do (offload: its streaming builder; a loader quantization)
DIT_ALWAYS = ("dense_attention", "fast_norm")


@dataclass(frozen=True)
class FlagPolicy:
    """The module's arguments split into what LTX-2 receives and what ltx-tui does instead."""

    ltx_argv: tuple[str, ...]
    verdicts: tuple[Verdict, ...] = ()
    ltx2_does: tuple[str, ...] = ()  # options LTX-2 itself realises (from flags the launcher adds)
    dit_steps: tuple[str, ...] = ()  # plan step kinds ltx-tui applies to each DiT build
    decoder_steps: tuple[str, ...] = ("diffvae_layout", "na_backend")
    notes: tuple[str, ...] = field(default=())

    @property
    def conflicts(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.verdict == "conflicts"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # never print usage and exit: the caller reports
        raise FlagConflict(message)


def _parser() -> _Parser:
    p = _Parser(add_help=False, allow_abbrev=False)
    p.add_argument("--quantization")
    p.add_argument("--compile", nargs="*")
    p.add_argument("--offload")
    p.add_argument("--diffvae-optimization")
    p.add_argument("--max-batch-size")
    return p


def _bool(text: str) -> bool | None:
    return {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}.get(text.strip().lower())


def _compile_verdict(pairs: list[str], c: Compile) -> tuple[bool, str, str]:
    """(agrees, in words, the option it turns on)."""
    if c.enabled is not CompileEnabled.TRUE:
        return False, "the profile has compile.enabled = false", "compile.enabled"
    given: dict[str, str] = {}
    for item in pairs:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep:
            raise FlagConflict(f"--compile expects KEY=VALUE pairs, got {item!r}")
        if key in given:
            raise FlagConflict(f"--compile {key}= is given twice (LTX-2 refuses that too)")
        if key in COMPILE_EXTRA_KEYS:
            raise FlagConflict(f"--compile {key}=...: the profile has no option for {key}; "
                               "drop it, or run LTX-2 without ltx-tui (`ltx-tui --check --ltx-args`)")
        if key not in Compile.KEYS:
            raise FlagConflict(f"--compile {key}=...: not a key LTX-2 knows "
                               f"(keys: {', '.join(Compile.KEYS + COMPILE_EXTRA_KEYS)})")
        given[key] = raw.strip()
    wrong = []
    defaults = Compile()  # LTX-2's CompilationConfig() for the keys not given
    for key in Compile.KEYS:
        raw = given.get(key, str(getattr(defaults, key)))
        want = getattr(c, key)
        if key in ("fullgraph", "capture"):
            same = _bool(raw) == want
        elif key == "dynamic":
            same = (raw.lower() if _bool(raw) is None else str(_bool(raw)).lower()) == str(want) \
                or (raw.lower() in ("none", "null") and str(want) == "auto")
        elif key == "mode":
            same = raw == str(want) or (raw.lower() in ("none", "null") and str(want) == "default")
        else:
            same = raw == str(want)
        if not same:
            said = f"{key}={raw}" if key in given else f"{key} left at LTX-2's default ({raw})"
            wrong.append((key, f"{said} but the profile has compile.{key} = {want}"))
    if wrong:
        return False, "; ".join(text for _, text in wrong), ", ".join(f"compile.{key}" for key, _ in wrong)
    return True, "compile.enabled = true" + "".join(f", compile.{k} = {v}" for k, v in given.items()), "compile.enabled"


def _flag_text(name: str, value) -> str:
    if isinstance(value, list):
        return " ".join([name, *value])
    return f"{name} {value}"


def _expands(name: str, flags) -> str | None:
    """The flag of `flags` that argument name `name` is, or argparse would expand it to."""
    if name in flags:
        return name
    return next((f for f in flags if name.startswith("--") and len(name) > 2 and f.startswith(name)), None)


def abbreviations(args: list[str]) -> list[str]:
    """Arguments that argparse would expand to one of FLAGS (LTX-2 allows abbreviations)."""
    return [a for a in args if a.split("=", 1)[0] not in FLAGS and _expands(a.split("=", 1)[0], FLAGS)]


def dropped_by_mgpu(args: list[str] | tuple[str, ...]) -> list[str]:
    """'FLAG: what LTX-2's multi-GPU modules would do with it' for each such flag in `args`."""
    out = []
    for a in args:
        full = _expands(a.split("=", 1)[0], MGPU_DROPPED)
        if full is not None and not any(o.startswith(f"{full}:") for o in out):
            out.append(f"{full}: {MGPU_DROPPED[full]}")
    return out


class ProfileConflict(FlagConflict):
    """The profile asks for what the module cannot do (it would silently do something else)."""


MGPU_FIX = ('set transformer.quantization = "fp8-cast" and offload.mode = "none" in the profile (what LTX-2\'s '
            "multi-GPU modules run), or run the module without _mgpu (one GPU) to keep them")


def mgpu_refusals(profile: Profile) -> list[str]:
    """What a profile asks of LTX-2's multi-GPU modules that they would silently not do (each a flag
    they take no value of, whether or not it was given: the profile asks it)."""
    from backends.config.rules import mgpu_drops

    return [f"it takes no {drop} (fix: {MGPU_FIX})" for drop in mgpu_drops(profile)]


def _refuse_abbreviations(args: list[str]) -> None:
    short = abbreviations(args)
    if short:
        raise FlagConflict(f"{', '.join(short)}: an abbreviation of {', '.join(f for f in FLAGS if any(f.startswith(s.split('=')[0]) for s in short))}; "
                           "spell the flag out (the profile decides its value)")


def _decided(profile: Profile) -> None:
    undecided = [k for k in UNIT if str(profile.get(k)) == "auto"]
    if undecided:
        raise ValueError(f"{', '.join(undecided)} = auto: the flag policy judges a decided profile (Plan.pinned())")


def policy(args: list[str] | tuple[str, ...], profile: Profile, *, multi_gpu: bool = False) -> FlagPolicy:
    """Compare the module's arguments with `profile` (auto decided: `Plan.pinned()`); FlagConflict
    lists every disagreement. `multi_gpu`: the module is one of LTX-2's multi-GPU modules (`MGPU_MODULES`)."""
    _decided(profile)
    args = list(args)
    if multi_gpu:
        return _mgpu_policy(args, profile)
    _refuse_abbreviations(args)
    ns, rest = _parser().parse_known_args(args)
    verdicts: list[Verdict] = []

    def judge(flag: str, option: str, ok: bool, detail: str) -> None:
        verdicts.append(Verdict(flag, option, "agrees" if ok else "conflicts", detail))

    q = profile.transformer.quantization
    if ns.quantization is not None:
        judge(_flag_text("--quantization", ns.quantization), "transformer.quantization", ns.quantization == str(q),
              f"the profile has transformer.quantization = {q}")
    if ns.compile is not None:
        ok, detail, option = _compile_verdict(ns.compile, profile.compile)
        judge(_flag_text("--compile", ns.compile), option, ok, detail)
    o = profile.offload.mode
    if ns.offload is not None:
        judge(_flag_text("--offload", ns.offload), "offload.mode", ns.offload == str(o),
              f"the profile has offload.mode = {o}")
    if ns.diffvae_optimization is not None:
        mode = profile.diffvae.mode
        judge(_flag_text("--diffvae-optimization", ns.diffvae_optimization), "diffvae.mode",
              ns.diffvae_optimization == str(mode), f"the profile has diffvae.mode = {mode}")
    n = profile.memory.max_batch_size
    if ns.max_batch_size is not None:
        given_n = ns.max_batch_size.strip()
        judge(_flag_text("--max-batch-size", ns.max_batch_size), "memory.max_batch_size",
              given_n.isdigit() and int(given_n) == n, f"the profile has memory.max_batch_size = {n}")

    ltx_argv, ltx2_does, notes = list(rest), [], []
    # LTX-2 sizes its decode tiles for the layout it is told (the launcher lays it out itself)
    ltx_argv += ["--diffvae-optimization", str(profile.diffvae.mode)]
    dit_steps = list(DIT_ALWAYS)
    if o is not OffloadMode.NONE and q not in OFFLOAD_QUANTIZATIONS:
        raise FlagConflict(f"offload.mode = {o} with transformer.quantization = {q}: under `ltx-tui run` offload is "
                           "LTX-2's own block streaming, which takes only quantization none or fp8-cast; set "
                           "transformer.quantization = \"fp8-cast\" (or \"none\"), or offload.mode = \"none\"")
    if o is not OffloadMode.NONE:
        ltx_argv += ["--offload", str(o)]
        ltx2_does.append(f"offload.mode = {o}: LTX-2's StreamingModelBuilder (--offload {o})")
        if q is not Quantization.NONE:
            ltx_argv += ["--quantization", str(q)]
            ltx2_does.append(f"transformer.quantization = {q}: LTX-2's policy on the streamed model (--quantization {q})")
        if profile.compile.enabled is CompileEnabled.TRUE:
            c = profile.compile  # streamed weights: no CUDA graphs (the plan's fallback)
            flag = replace(c, capture=False, mode=CompileMode(value("compile.mode", c.mode).without_graphs or c.mode)
                           ).ltx2_flag()
            ltx_argv += flag
            ltx2_does.append(f"compile: LTX-2's compile op on the streamed model ({' '.join(flag)})")
        if profile.offload.gpu_slots != 2 or profile.offload.prefetch != 2:
            notes.append("offload.gpu_slots / offload.prefetch: LTX-2's streaming builder uses its own (2 GPU slots)")
    elif value("transformer.quantization", q).runner == LOADER:
        ltx_argv += ["--quantization", str(q)]
        ltx2_does.append(f"transformer.quantization = {q}: LTX-2's loader policy (--quantization {q})")
        dit_steps += ["compile", "capture"]
    else:
        dit_steps += ["quantize", "compile", "capture"]
    if n != 1:
        ltx_argv += ["--max-batch-size", str(n)]
        ltx2_does.append(f"memory.max_batch_size = {n}: --max-batch-size {n} (read by some modules only)")
    return FlagPolicy(tuple(ltx_argv), tuple(verdicts), tuple(ltx2_does), tuple(dit_steps), notes=tuple(notes))


def _refuse_dropped(args: list[str]) -> None:
    """FlagConflict for the flags LTX-2's multi-GPU modules would silently drop."""
    dropped = dropped_by_mgpu(args)
    if dropped:
        raise FlagConflict("refused, LTX-2 would silently drop them:\n" + "\n".join(f"  {d}" for d in dropped)
                           + "\ndrop them (ltx-tui's profile sets what the multi-GPU modules can take)")


def _mgpu_policy(args: list[str], profile: Profile) -> FlagPolicy:
    """LTX-2's multi-GPU modules: the flags they would drop are refused, the profile's quantization
    must be theirs (fp8-cast) and its offload none; compile and the DiffVAE layout are ltx-tui's in
    every rank (LTX-2 gets `--diffvae-optimization MODE` to size its decode tiles, as for one GPU)."""
    _refuse_dropped(args)
    refusals = mgpu_refusals(profile)
    if refusals:
        raise ProfileConflict("\n".join(refusals))
    _refuse_abbreviations(args)
    ns, rest = _parser().parse_known_args(args)
    verdicts: list[Verdict] = []
    if ns.compile is not None:
        ok, detail, option = _compile_verdict(ns.compile, profile.compile)
        verdicts.append(Verdict(_flag_text("--compile", ns.compile), option, "agrees" if ok else "conflicts", detail))
    mode = profile.diffvae.mode
    if ns.diffvae_optimization is not None:
        verdicts.append(Verdict(_flag_text("--diffvae-optimization", ns.diffvae_optimization), "diffvae.mode",
                                "agrees" if ns.diffvae_optimization == str(mode) else "conflicts",
                                f"the profile has diffvae.mode = {mode}"))
    ltx2_does = ["transformer.quantization = fp8-cast: LTX-2's multi-GPU ranks (each builds the DiT fp8-cast)",
                 f"parallel.gpus = {profile.parallel.gpus}: LTX-2's MGPUController, one rank per visible GPU "
                 "(sequence-parallel DiT, Accelerate Gemma, distributed VAE decode)"]
    notes = []
    if profile.memory.max_batch_size != 1:
        notes.append(f"memory.max_batch_size = {profile.memory.max_batch_size}: not passed (LTX-2's multi-GPU "
                     "modules never read --max-batch-size)")
    return FlagPolicy(tuple(rest) + ("--diffvae-optimization", str(mode)), tuple(verdicts), tuple(ltx2_does),
                      (*DIT_ALWAYS, "compile", "capture"), notes=tuple(notes))


def equivalent_profile(args: list[str] | tuple[str, ...], expandable_segments: bool, *,
                       multi_gpu: bool = False, world_size: int = 1) -> Profile:
    """The profile that says what LTX-2's own flags in `args` say (for `ltx-tui run --as-built`:
    the record and the memory plan's prediction); FlagConflict for a value the profile cannot hold.
    `multi_gpu`: one of LTX-2's multi-GPU modules, over `world_size` ranks (fp8-cast, no offload;
    the flags it would drop are refused: the record could not say what ran)."""
    if multi_gpu:
        _refuse_dropped(list(args))
    short = abbreviations(list(args))
    if short:
        raise FlagConflict(f"{', '.join(short)}: spell the flag out (LTX-2 would expand the abbreviation; the record "
                           "could not say what it did)")
    ns, _ = _parser().parse_known_args(list(args))
    values: dict[str, object] = {"memory.expandable_segments": expandable_segments, "compile.enabled": False,
                                 "diffvae.mode": "chunked_eager"}  # LTX-2's defaults
    if multi_gpu:
        values["transformer.quantization"] = str(Quantization.FP8_CAST)
        values["parallel.gpus"] = max(1, world_size)
    if ns.quantization is not None:
        values["transformer.quantization"] = ns.quantization
    if ns.offload is not None:
        values["offload.mode"] = ns.offload
    if ns.diffvae_optimization is not None:
        values["diffvae.mode"] = ns.diffvae_optimization
    if ns.max_batch_size is not None:
        values["memory.max_batch_size"] = int(ns.max_batch_size) if ns.max_batch_size.isdigit() else ns.max_batch_size
    if ns.compile is not None:
        values["compile.enabled"] = True
        for item in ns.compile:
            key, _, raw = item.partition("=")
            if key.strip() in Compile.KEYS:
                flag = _bool(raw)
                values[f"compile.{key.strip()}"] = flag if key.strip() in ("fullgraph", "capture") else \
                    ("auto" if raw.strip().lower() in ("none", "null") and key.strip() == "dynamic" else
                     "default" if raw.strip().lower() in ("none", "null") else raw.strip().lower()
                     if key.strip() == "dynamic" else raw.strip())
    try:
        return Profile().replace(**values)
    except (ValueError, TypeError, KeyError) as e:
        raise FlagConflict(f"LTX-2's flags cannot be read as a profile: {e}") from None
