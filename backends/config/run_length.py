"""`auto` for the options whose first call compiles: `diffvae.mode` and `compile.enabled`.

A compiled decoder or DiT pays its compile in its first call, once per process (from ltx-tui's
persistent compile cache when that is warm: `runtime.compile_cache`), and is faster on every later
call. Whether that pays off depends on how many calls one process makes, so `auto` decides for a
run of a given length (`RunLength`: generations per process x decodes or DiT forwards each): the
value with the shortest first call + (calls - 1) x steady time among those `ltx-tui --tune`
measured here (`Candidate.run_s`), else the prior (`PRIOR`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from backends.config.values import value as descriptor
from backends.machine.tuned import Candidate, Tuned

UNIT = {"diffvae.mode": "decode", "compile.enabled": "DiT forward"}  # what one call of each is
# LTX-2 v1.2.0's distilled schedule (ltx_pipelines/utils/constants.py): stage 1 steps through the 9
# DISTILLED_SIGMA_VALUES (8 steps), stage 2 through the 4 STAGE_2_DISTILLED_SIGMA_VALUES (3 steps),
# one DiT forward a step (no guidance).
DISTILLED_FORWARDS = 8 + 3
# Without a measurement: neither compiles. On a fresh H200 (bench/RESULTS.md, "twelfth round": --tune
# and compile_cache.py) a compiled decoder's first decode takes 34.5 s (6.6 s from a warm compile
# cache) to save about 0.59 s a decode (0.89 -> 0.31 s), and compiling the DiT's blocks 10.5 s (2.0 s warm) to save
# about 0.09 s a forward at 6144 tokens (0.05 s at 1536; "bench/ltx2_dit.py"): neither pays off within one distilled
# generation (1 decode, 11 forwards), and a process that runs many generations is what --tune
# --runs N measures for.
PRIOR = {"diffvae.mode": "chunked_eager", "compile.enabled": "false"}
PRIOR_WHY = {
    "diffvae.mode": "prior, not measured here: a compiled layout's first decode compiles (34.5 s on the H200, 6.6 s "
                    "cached) to save 0.59 s a decode",
    "compile.enabled": "prior, not measured here: compiling the DiT's blocks takes 10.5 s on the H200 (2.0 s cached) "
                       "to save 0.09 s a forward",
}


@dataclass(frozen=True)
class RunLength:
    """How many calls of each compiled model one process makes."""

    runs: int = 1  # generations in one process (`--tune --runs N`; `ltx-tui run`: 1)
    dit_forwards: int = DISTILLED_FORWARDS  # DiT forwards a generation (at least: guidance adds forwards)
    source: str = "LTX-2's distilled schedule, 8 + 3 steps"

    def calls(self, option: str) -> int:
        return self.runs * (self.dit_forwards if option == "compile.enabled" else 1)

    def text(self, option: str) -> str:
        """'1 run of 11 DiT forwards (LTX-2's distilled schedule, 8 + 3 steps)', '2 runs (2 decodes)'."""
        runs = f"{self.runs} run{'s' if self.runs != 1 else ''}"
        if option == "compile.enabled":
            return f"{runs} of {self.dit_forwards} DiT forwards ({self.source})"
        n = self.calls(option)
        return f"{runs} ({n} decode{'s' if n != 1 else ''})"


def length_of(tuned: Tuned | None, length: RunLength | None) -> RunLength:
    """`length`, else a run as long as `--tune --runs N` said (1 without a tune)."""
    return length or RunLength(runs=tuned.runs if tuned is not None else 1)


def run_calls(tuned: Tuned | None, length: RunLength | None = None) -> dict[str, int]:
    """Per option whose first call compiles, the calls of a run of `length` (`length_of`)."""
    return {o: length_of(tuned, length).calls(o) for o in UNIT}


def _s(seconds: float) -> str:
    return f"{seconds:.3g} s"


LABEL = {"true": "compiled", "false": "eager"}  # compile.enabled's values, in words


def cost_text(c: Candidate, option: str, calls: int) -> str:
    """'chunked_compile 0.55 s/decode + 2.72 s compile (cached) = 3.27 s': the steady time, what the
    first call adds (a compile: from the warm compile cache where that was measured) and the total."""
    extra = max(c.first_call_s - c.ms / 1000, 0.0)
    if not descriptor(option, c.value).compiled:
        first = f" + {_s(extra)} first call{' (cached)' if c.warmup_cached_s is not None else ''}"
    else:
        first = f" + {_s(extra)} compile ({'cached' if c.warmup_cached_s is not None else 'cold cache'})"
    label = LABEL.get(c.value, c.label) if option == "compile.enabled" else c.label
    return f"{label} {_s(c.ms / 1000)}/{UNIT[option]}{first if extra > 0 else ''} = {_s(c.run_s(calls))}"


def counted(option: str, c: Candidate) -> bool:
    """Whether `auto` may weigh measured candidate `c`: a value this version knows (a cache written by
    another version may hold others), and for a compiled one, its first call measured (a cache from
    before first calls were timed has only the steady time, which leaves the compile out)."""
    try:
        compiled = descriptor(option, c.value).compiled
    except (KeyError, ValueError):
        return False
    return not compiled or c.warmup_s is not None


def auto_choice(option: str, tuned: Tuned | None, length: RunLength,
                runnable: Callable[[str], bool] = lambda v: True, cuda: bool = True) -> tuple[str, str]:
    """(the value `auto` picks for `option`, why): the measured value (that `runnable` allows) with
    the shortest run of `length`, else the prior (`cuda`: whether --tune times the compiled values
    here; on the CPU it leaves them out)."""
    calls = length.calls(option)
    ranked = [c for c in (tuned.ranked(option, calls) if tuned else []) if counted(option, c) and runnable(c.value)]
    if not ranked:
        return PRIOR[option], PRIOR_WHY[option] + ("; --tune measures it" if cuda else
                                                   "; --tune measures it on a CUDA GPU, not on the CPU")
    best, rest = ranked[0], ranked[1:]
    why = f"fastest measured here ({tuned.shapes}): {cost_text(best, option, calls)}"
    if rest:
        why += " beats " + ", ".join(cost_text(c, option, calls) for c in rest)
    return best.value, f"{why} over {length.text(option)}"
