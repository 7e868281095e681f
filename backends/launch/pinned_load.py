"""LTX-2's safetensors weights read onto a GPU through pinned host buffers.

LTX-2 v1.2.0's `SafetensorsStateDictLoader.load` (ltx_core/loader/sft_loader.py) opens each shard
with `safetensors.safe_open(device=...)` and takes one tensor after another: each is read from
the file's pages and copied to the device from pageable memory. `load` reads the same shards'
bytes in chunks of up to `CHUNK` into `SLOTS` pinned buffers, with threads reading (a copy out of
the page cache, or the disk) while the device copies the chunks read before. It returns what
LTX-2's loader returns: the same names through the same `SDOps` calls (`apply_to_key`, then
`apply_to_key_value` once a tensor is on the device, so a downcast still frees the original
before the next tensor), the same dtypes, shapes and bytes, size and dtype set. Copies and sd_ops
run on the device's current stream, in order; a buffer is refilled once its copies are done.

A file layout it does not know (a dtype outside `DTYPES`, a header it cannot parse) raises
`Unreadable`; `ltx-tui run` then uses LTX-2's own loader for that load.
"""

from __future__ import annotations

import json
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

CHUNK = 64 << 20  # bytes a pinned buffer holds
SLOTS = 4  # pinned buffers (and reading threads)
# safetensors' dtype names (its format's header) -> torch
DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}


class Unreadable(ValueError):
    """The file holds something `load` does not read; the message says what."""


@dataclass(frozen=True)
class Entry:
    """One tensor of a safetensors file: its bytes are [begin, end) of the file."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    begin: int
    end: int


def read_header(path: str) -> list[Entry]:
    """The tensors of a safetensors file (an 8-byte little-endian header length, a JSON header
    with each tensor's dtype, shape and data offsets after the header), in file order; each entry's
    byte count checked against its shape and dtype, and against the file's size."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise Unreadable(f"{path}: the safetensors header does not parse ({e})") from None
    if not isinstance(header, dict):
        raise Unreadable(f"{path}: the safetensors header is not a JSON object")
    data = os.path.getsize(path) - 8 - n
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = DTYPES.get(info.get("dtype")) if isinstance(info, dict) else None
        if dtype is None:
            raise Unreadable(f"{path}: tensor {name} has dtype {info.get('dtype') if isinstance(info, dict) else info!r}, "
                             f"not one of {', '.join(DTYPES)}")
        shape, offsets = info.get("shape"), info.get("data_offsets")
        if (not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape)
                or not isinstance(offsets, list) or len(offsets) != 2 or not all(isinstance(o, int) for o in offsets)):
            raise Unreadable(f"{path}: tensor {name} has shape {shape!r} and data_offsets {offsets!r}")
        begin, end = offsets
        nbytes = math.prod(shape) * dtype.itemsize
        if not 0 <= begin <= end <= data or end - begin != nbytes:
            raise Unreadable(f"{path}: tensor {name}'s bytes [{begin}, {end}) do not hold {dtype} {shape} "
                             f"({nbytes} bytes) within the file's {data} bytes of data")
        entries.append(Entry(name, dtype, tuple(shape), 8 + n + begin, 8 + n + end))
    return sorted(entries, key=lambda e: e.begin)


@dataclass
class _Read:
    """One read of [offset, offset + nbytes) of the file into a buffer, and the copies out of it:
    (offset in the buffer, bytes, the entry, offset in the entry's bytes)."""

    offset: int
    nbytes: int = 0
    copies: list[tuple[int, int, Entry, int]] = field(default_factory=list)


def _reads(entries: list[Entry]) -> list[_Read]:
    """Reads of up to CHUNK bytes over the entries' bytes, consecutive tensors sharing one."""
    reads: list[_Read] = []
    for entry in entries:
        done, size = 0, entry.end - entry.begin
        while done < size:
            read = reads[-1] if reads else None
            if read is None or read.offset + read.nbytes != entry.begin + done or read.nbytes == CHUNK:
                read = _Read(entry.begin + done)
                reads.append(read)
            n = min(size - done, CHUNK - read.nbytes)
            read.copies.append((read.nbytes, n, entry, done))
            read.nbytes += n
            done += n
    return reads


def _fill(fd: int, buffer: torch.Tensor, read: _Read) -> None:
    view = memoryview(buffer.numpy())[:read.nbytes]
    got = 0
    while got < read.nbytes:
        n = os.preadv(fd, [view[got:]], read.offset + got)
        if n <= 0:
            raise OSError(f"short read at byte {read.offset + got} of the file")
        got += n


_buffers: list[torch.Tensor] = []


def _pinned() -> list[torch.Tensor]:
    """SLOTS pinned buffers of CHUNK bytes, made once a process."""
    if len(_buffers) != SLOTS or _buffers[0].numel() != CHUNK:
        _buffers[:] = (torch.empty(CHUNK, dtype=torch.uint8, pin_memory=torch.cuda.is_available())
                       for _ in range(SLOTS))
    return _buffers


def load(paths: list[str], sd_ops, device: torch.device, state_dict_type) -> object:
    """`state_dict_type(sd, device, size, dtype)` of the shards at `paths` on `device`, as LTX-2's
    SafetensorsStateDictLoader.load makes it (`sd_ops`: LTX-2's SDOps or None): read in file
    order, entered in the order of the shard's names (safetensors' `keys()`, as LTX-2 walks them)."""
    sd: dict = {}
    size, dtypes = 0, set()
    for path in paths:
        entries = read_header(path)
        names = {e.name: e.name if sd_ops is None else sd_ops.apply_to_key(e.name) for e in entries}
        made: dict[str, list] = {}
        for entry, tensor in _tensors(path, [e for e in entries if names[e.name] is not None], device):
            key = names[entry.name]
            made[entry.name] = [(key, tensor)] if sd_ops is None else list(sd_ops.apply_to_key_value(key, tensor))
            del tensor  # a value sd_ops replaced is freed before the next tensor is made
        for name in sorted(made):
            for key, value in made[name]:
                size += value.nbytes
                dtypes.add(value.dtype)
                sd[key] = value
    return state_dict_type(sd=sd, device=device, size=size, dtype=dtypes)


def _tensors(path: str, entries: list[Entry], device: torch.device):
    """(entry, its tensor on `device`) for each entry, in file order, each yielded once its bytes
    are copied (on the device's current stream: later work on that stream sees them)."""
    for entry in entries:
        if entry.end == entry.begin:
            yield entry, torch.empty(entry.shape, dtype=entry.dtype, device=device)
    reads = _reads([e for e in entries if e.end > e.begin])
    buffers = _pinned()
    cuda = device.type == "cuda"
    making: dict[str, torch.Tensor] = {}
    fd = os.open(path, os.O_RDONLY)
    try:
        with ThreadPoolExecutor(len(buffers)) as pool:
            def refill(slot: int, read: _Read, copied: torch.cuda.Event | None) -> None:
                if copied is not None:
                    copied.synchronize()  # the buffer's earlier copies have left it
                _fill(fd, buffers[slot], read)

            pending = {k: pool.submit(refill, k, reads[k], None) for k in range(min(len(buffers), len(reads)))}
            for k, read in enumerate(reads):
                slot = k % len(buffers)
                pending.pop(k).result()
                for at, n, entry, offset in read.copies:
                    tensor = making.get(entry.name)
                    if tensor is None:
                        tensor = making[entry.name] = torch.empty(entry.shape, dtype=entry.dtype, device=device)
                    tensor.reshape(-1).view(torch.uint8)[offset:offset + n].copy_(buffers[slot][at:at + n],
                                                                                  non_blocking=cuda)
                    if offset + n == entry.end - entry.begin:
                        yield entry, making.pop(entry.name)
                copied = None
                if cuda:  # the copies run on the target device's current stream
                    copied = torch.cuda.Event()
                    copied.record(torch.cuda.current_stream(device))
                if k + len(buffers) < len(reads):
                    pending[k + len(buffers)] = pool.submit(refill, slot, reads[k + len(buffers)], copied)
    finally:
        if cuda:  # no copy still reads a buffer when this ends, however it ends
            torch.cuda.current_stream(device).synchronize()
        os.close(fd)
