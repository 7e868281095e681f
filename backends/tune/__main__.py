"""The tune worker: `python -m backends.tune SPEC_JSON` prints one JSON line with the timing."""

import json
import sys

from backends.tune.run import worker

if __name__ == "__main__":
    print(json.dumps(worker(json.loads(sys.argv[1]))), flush=True)
