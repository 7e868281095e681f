"""The tune worker: `python -m backends.tune [SPEC_JSON]` prints one JSON line with the timing.

Without SPEC_JSON it first imports torch and the measurements, and on CUDA starts it and imports
LTX-2's models and Inductor (`measure.preload`), then reads the spec as one line on stdin: the tuner starts the next worker while the current one measures."""

import importlib
import json
import sys

from backends.tune.run import worker

if __name__ == "__main__":
    if len(sys.argv) > 1:
        spec = sys.argv[1]
    else:
        import torch

        measure = importlib.import_module("backends.tune.measure")  # imported before the spec arrives

        if torch.cuda.is_available():  # (on a CPU the import would slow the worker measuring now)
            torch.cuda.init()
            measure.preload()
        spec = sys.stdin.readline()
    print(json.dumps(worker(json.loads(spec))), flush=True)
