"""Weight streaming for offload `cpu` / `disk`.

Each block's parameters and buffers are packed into one host buffer (pinned CPU memory, or
a memory-mapped file for `disk`). A fixed set of `gpu_slots` GPU buffers holds the blocks
being run; block i uses slot i % gpu_slots. A forward pre-hook waits for block i's copy,
points its tensors at the slot, and queues copies of the next `prefetch` blocks on a side
stream; a forward hook marks the slot free once the compute stream is past block i.
Peak GPU memory for weights is bounded by the slots.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn as nn

ALIGN = 256


@dataclass
class _Entry:
    owner: nn.Module
    name: str
    is_param: bool
    offset: int
    nbytes: int
    shape: torch.Size
    dtype: torch.dtype


def _tensors(block: nn.Module):
    for mod in block.modules():
        for name, p in mod.named_parameters(recurse=False):
            yield mod, name, True, p
        for name, b in mod.named_buffers(recurse=False):
            if b is not None:
                yield mod, name, False, b


def _set(entry: _Entry, tensor: torch.Tensor) -> None:
    if entry.is_param:
        getattr(entry.owner, entry.name).data = tensor
    else:
        setattr(entry.owner, entry.name, tensor)


class BlockStreamer:
    """Streams `blocks`' weights from host memory through `gpu_slots` GPU buffers."""

    def __init__(self, blocks: Sequence[nn.Module], device: torch.device | str, *, gpu_slots: int = 2,
                 prefetch: int = 2, mode: str = "cpu", disk_dir: str | None = None) -> None:
        if mode not in ("cpu", "disk"):
            raise ValueError(f"offload mode must be 'cpu' or 'disk', got {mode!r}")
        if gpu_slots < 1 or prefetch < 0:
            raise ValueError(f"gpu_slots must be >= 1 and prefetch >= 0, got {gpu_slots}, {prefetch}")
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise ValueError(f"offload streams weights to a CUDA device, got {self.device}")
        self.blocks = list(blocks)
        self.mode = mode
        self.gpu_slots = min(gpu_slots, len(self.blocks))
        # A slot is free for block i+j only once the block before it there has run.
        self.prefetch = min(prefetch, max(self.gpu_slots - 1, 0))
        self.layouts: list[list[_Entry]] = []
        self.hosts: list[torch.Tensor] = []
        for i, block in enumerate(self.blocks):
            entries, offset = [], 0
            for owner, name, is_param, t in _tensors(block):
                nbytes = t.numel() * t.element_size()
                entries.append(_Entry(owner, name, is_param, offset, nbytes, t.shape, t.dtype))
                offset += -(-nbytes // ALIGN) * ALIGN
            host = self._host_buffer(max(offset, 1), i, disk_dir)
            for e, (_, _, _, t) in zip(entries, _tensors(block)):
                host[e.offset:e.offset + e.nbytes].copy_(t.detach().contiguous().view(-1).view(torch.uint8).cpu())
            self.layouts.append(entries)
            self.hosts.append(host)
            self._point(i, host)
        self.slot_bytes = max(h.numel() for h in self.hosts)
        self.slots = [torch.empty(self.slot_bytes, dtype=torch.uint8, device=self.device)
                      for _ in range(self.gpu_slots)]
        self.copy_stream = torch.cuda.Stream(self.device)
        self.copied = [torch.cuda.Event() for _ in self.slots]
        self.released = [torch.cuda.Event() for _ in self.slots]
        self.owner: list[int | None] = [None] * self.gpu_slots
        self.running: set[int] = set()
        self.handles = []
        for i, block in enumerate(self.blocks):
            self.handles.append(block.register_forward_pre_hook(self._before(i)))
            self.handles.append(block.register_forward_hook(self._after(i)))

    def _host_buffer(self, nbytes: int, index: int, disk_dir: str | None) -> torch.Tensor:
        if self.mode == "cpu":
            return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        fd, path = tempfile.mkstemp(prefix=f"ltx-offload-{index}-", suffix=".bin", dir=disk_dir)
        try:
            os.ftruncate(fd, nbytes)
            return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
        finally:
            os.close(fd)
            os.unlink(path)  # the mapping keeps the data; nothing is left behind on disk

    def _point(self, i: int, buffer: torch.Tensor) -> None:
        for e in self.layouts[i]:
            _set(e, buffer[e.offset:e.offset + e.nbytes].view(e.dtype).view(e.shape))

    def _load(self, i: int) -> int:
        slot = i % self.gpu_slots
        if self.owner[slot] != i:
            host = self.hosts[i]
            with torch.cuda.stream(self.copy_stream):
                self.copy_stream.wait_event(self.released[slot])
                self.slots[slot][:host.numel()].copy_(host, non_blocking=True)
                self.copied[slot].record(self.copy_stream)
            self.owner[slot] = i
        return slot

    def _before(self, i: int):
        def hook(module, args):
            slot = self._load(i)
            torch.cuda.current_stream(self.device).wait_event(self.copied[slot])
            self._point(i, self.slots[slot])
            self.running.add(slot)
            # Queue the next blocks (wrapping to the first, for the next forward) into slots
            # no running block uses; a copy waits until that slot's last block has run.
            n = len(self.blocks)
            for j in range(1, self.prefetch + 1):
                target = (i + j) % n
                if target != i and target % self.gpu_slots not in self.running:
                    self._load(target)
        return hook

    def _after(self, i: int):
        def hook(module, args, output):
            slot = i % self.gpu_slots
            self.released[slot].record(torch.cuda.current_stream(self.device))
            self.running.discard(slot)
            self._point(i, self.hosts[i])
        return hook

    @property
    def streamed_bytes(self) -> int:
        return sum(h.numel() for h in self.hosts)

    def remove(self) -> None:
        """Detach the hooks; block weights stay in host memory."""
        for h in self.handles:
            h.remove()
        self.handles.clear()
