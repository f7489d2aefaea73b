"""Where a process keeps its clients' private states between rounds: memory or disk.

A store maps a client id to that client's private partition (``{state-dict key: tensor}``) and
behaves like a ``dict`` (``store[i]``, ``store.get(i, default)``, ``items()``, ``len``,
``in``), so ``trainer.client_states`` reads the same whatever the backend. Clients that never
trained have no entry: the orchestrator then uses the module's initial private state.

* :class:`MemoryClientStore` (``trainer.client_state_storage: memory``, the default): CPU
  tensors in a ``dict``; memory grows with ``trained clients x private size``.
* :class:`DiskClientStore` (``client_state_storage: disk``): one memory-mapped file holding a
  fixed-size slot per client, laid out from the private state's keys, shapes and dtypes.
  The file is sparse (a slot costs disk only once written) and is unlinked as soon as it is
  mapped, so nothing is left behind even when the process is killed. The pages are
  file-backed: the kernel may write them out and drop them under memory pressure, which it
  cannot do with the tensors of the memory store. Values read back are copies (a slot is
  overwritten in place by the next ``put``).

Both give bit-identical results (the same tensors go in and come out). A checkpoint stores
:meth:`ClientStore.state` (a plain ``{client: {key: tensor}}`` dict, the same format with
either backend) and :meth:`ClientStore.load` puts it back.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path

import torch
from torch import Tensor

from fedlight.core.errors import ConfigError

STORAGES = ("memory", "disk")
_ALIGN = 64  # bytes; every tensor of a slot starts on a cache line (and on its dtype's size)

ClientState = dict[str, Tensor]


class ClientStore(MutableMapping[int, ClientState]):
    """Per-client private state: ``put`` / ``get`` / ``items`` plus ``state`` / ``load`` for
    checkpoints. Subclasses implement the ``MutableMapping`` methods."""

    def put(self, client_id: int, state: Mapping[str, Tensor]) -> None:
        """Store (a copy of) ``state`` as client ``client_id``'s private state."""
        self[client_id] = dict(state)

    def state(self) -> dict[int, ClientState]:
        """Every stored client's state as a plain dict ordered by client id (for checkpoints)."""
        return {client_id: self[client_id] for client_id in sorted(self)}

    def load(self, states: Mapping[int, Mapping[str, Tensor]]) -> None:
        """Replace the content with ``states`` (a :meth:`state` dict, e.g. from a checkpoint)."""
        self.clear()
        for client_id, state in states.items():
            self.put(int(client_id), state)

    def close(self) -> None:
        """Release the backing memory; the store is empty afterwards."""
        self.clear()


class MemoryClientStore(ClientStore):
    """CPU tensors in a dict (the tensors put in are kept as they are, not copied)."""

    def __init__(self) -> None:
        self._states: dict[int, ClientState] = {}

    def __getitem__(self, client_id: int) -> ClientState:
        return self._states[client_id]

    def __setitem__(self, client_id: int, state: ClientState) -> None:
        self._states[int(client_id)] = state

    def __delitem__(self, client_id: int) -> None:
        del self._states[client_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._states)

    def __len__(self) -> int:
        return len(self._states)


class DiskClientStore(ClientStore):
    """Private states in slots of one sparse, memory-mapped, already unlinked file.

    Args:
        template: one client's private state (the initial one): fixes the keys, shapes and
            dtypes every stored state must have.
        num_clients: number of slots (client ids are ``0 .. num_clients - 1``).
        directory: where the file is created (then unlinked); default: the system's
            temporary folder. Pick a real disk, not a RAM-backed ``tmpfs``.
    """

    def __init__(self, template: Mapping[str, Tensor], num_clients: int,
                 directory: str | Path | None = None) -> None:
        if num_clients < 1:
            raise ValueError(f"num_clients must be at least 1, got {num_clients}")
        self.num_clients = num_clients
        self._layout: list[tuple[str, int, torch.Size, torch.dtype]] = []  # key, offset, ...
        offset = 0
        for key, tensor in template.items():
            nbytes = tensor.numel() * tensor.element_size()
            self._layout.append((key, offset, tensor.shape, tensor.dtype))
            offset += -(-nbytes // _ALIGN) * _ALIGN
        self.slot_bytes = offset
        self._present: set[int] = set()
        size = max(1, self.slot_bytes * num_clients)
        if directory is not None:
            Path(directory).mkdir(parents=True, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix="fedlight-client-states-", suffix=".bin",
                                    dir=None if directory is None else str(directory))
        try:
            os.ftruncate(fd, size)  # sparse: no block is allocated before it is written
            self._mmap: mmap.mmap | None = mmap.mmap(fd, size)
        finally:
            os.close(fd)
            try:
                os.unlink(path)  # the mapping keeps the data; the file vanishes with it
            except OSError:  # pragma: no cover - platforms that cannot unlink an open file
                pass
        self._buffer = torch.frombuffer(self._mmap, dtype=torch.uint8)

    def _views(self, client_id: int) -> dict[str, Tensor]:
        if not 0 <= client_id < self.num_clients:
            raise KeyError(f"client {client_id} is outside 0..{self.num_clients - 1}")
        base = client_id * self.slot_bytes
        views = {}
        for key, offset, shape, dtype in self._layout:
            nbytes = shape.numel() * torch.empty((), dtype=dtype).element_size()
            raw = self._buffer[base + offset: base + offset + nbytes]
            views[key] = raw.view(dtype).view(shape)
        return views

    def __getitem__(self, client_id: int) -> ClientState:
        if client_id not in self._present:
            raise KeyError(client_id)
        return {key: view.clone() for key, view in self._views(client_id).items()}

    def __setitem__(self, client_id: int, state: ClientState) -> None:
        client_id = int(client_id)
        views = self._views(client_id)
        if set(state) != set(views):
            raise ValueError(f"client {client_id}: private state keys {sorted(state)} differ from "
                             f"the store's {sorted(views)}")
        for key, view in views.items():
            value = state[key]
            if value.shape != view.shape or value.dtype != view.dtype:
                raise ValueError(f"client {client_id}: {key!r} is {tuple(value.shape)} "
                                 f"{value.dtype}, the store holds {tuple(view.shape)} {view.dtype}")
            view.copy_(value.detach())
        self._present.add(client_id)

    def __delitem__(self, client_id: int) -> None:
        self._present.remove(client_id)

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._present))

    def __len__(self) -> int:
        return len(self._present)

    def close(self) -> None:
        self._present.clear()
        self._buffer = torch.empty(0, dtype=torch.uint8)
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:  # a tensor view is still alive; the mapping goes with it
                pass
            self._mmap = None


def make_store(storage: str, template: Mapping[str, Tensor], num_clients: int,
               directory: str | Path | None = None) -> ClientStore:
    """The store named by ``trainer.client_state_storage`` (``memory`` or ``disk``)."""
    if storage == "memory":
        return MemoryClientStore()
    if storage == "disk":
        return DiskClientStore(template, num_clients, directory)
    raise ConfigError(f"unknown client_state_storage {storage!r}; valid: {', '.join(STORAGES)}")


__all__ = ["STORAGES", "ClientStore", "DiskClientStore", "MemoryClientStore", "make_store"]
