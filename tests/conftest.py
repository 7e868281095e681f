import os
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))

# Without CUDA, Triton kernels run in its CPU interpreter; the switch is read when kernels
# are defined, so it must be set before kernels.na3d_triton is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
