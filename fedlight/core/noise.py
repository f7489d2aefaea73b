"""Counter-based noise: the random numbers a client's training step draws (FedPick's and
AutoHS's Gumbel noise, dropout masks), as a pure function of a per-client key, a counter and
the element's index.

Why not torch's generators: a training step vmapped over several clients (the batched
engine) draws from ONE global stream, so client k's noise would depend on which clients share
its batch and on their order; and a CUDA graph replays the draws of its capture. A
:class:`NoiseSource` instead keeps its key and counter in (non-persistent) buffers: the loop
and the batched engine both read them, vmap stacks them per client like any buffer, a CUDA
graph replays the in-place counter increment, and element ``i`` of a draw is the same
whatever the shape around it (the first rows of a larger batch draw what a smaller batch
draws). Nothing is stored in checkpoints: the runtime re-keys every source from
``(seed, round, client)`` before each local training (:func:`reseed_noise`), so a resumed run
draws the same numbers.

The hash is murmur3's 32-bit finalizer applied twice (to the index mixed with a per-draw seed
that hashes the key and the counter), in int64 arithmetic kept below 2**49 (no overflow), and
23 of its bits make a float32 strictly inside (0, 1); ``tests/test_noise.py`` checks the
moments of the uniform, Gumbel and dropout draws and that distinct keys and counters give
uncorrelated streams.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fedlight.core.seeding import derive_seed

_MASK32 = 0xFFFFFFFF
_MASK31 = 0x7FFFFFFF
_FLOAT_BITS = 23  # (k + 0.5) / 2**23 is exact in float32 and strictly inside (0, 1)


def _mul32(value: Tensor, constant: int) -> Tensor:
    """``value * constant mod 2**32`` for int64 values below 2**32, without int64 overflow:
    the high and low 16 bits are multiplied apart."""
    low = (value & 0xFFFF) * constant
    high = (((value >> 16) * constant) & 0xFFFF) << 16
    return (low + high) & _MASK32


def _fmix32(value: Tensor) -> Tensor:
    """murmur3's finalizer: every input bit flips each output bit with probability ~1/2."""
    value = value ^ (value >> 16)
    value = _mul32(value, 0x85EBCA6B)
    value = value ^ (value >> 13)
    value = _mul32(value, 0xC2B2AE35)
    return value ^ (value >> 16)


class NoiseSource(nn.Module):
    """A stream of random numbers keyed per client (module docstring).

    Buffers (non-persistent, so never in a state dict): ``key`` (two 31-bit halves of the
    seed) and ``counter`` (draws so far). Each draw hashes ``(key, counter, element index)``
    and then advances ``counter`` by one. A source that was never keyed by the runtime (a
    plain ``lightning.Trainer`` fit) keys itself once from torch's global generator, so
    ``seed_everything`` still fixes it.
    """

    key: Tensor
    counter: Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("key", torch.zeros(2, dtype=torch.int64), persistent=False)
        self.register_buffer("counter", torch.zeros((), dtype=torch.int64), persistent=False)
        self.keyed = False

    def reseed(self, seed: int) -> None:
        """Key the stream with ``seed`` and restart it (filled in place on the key's device:
        no host-to-device copy, which on a GPU would wait for the work queued before it)."""
        with torch.no_grad():
            self.key[0].fill_(seed & _MASK31)
            self.key[1].fill_((seed >> 31) & _MASK31)
            self.counter.zero_()
        self.keyed = True

    def uniform_like(self, like: Tensor) -> Tensor:
        """Uniform numbers in (0, 1), shaped like ``like`` (its dtype, its device)."""
        if not self.keyed:
            self.reseed(int(torch.randint(0, 2**62, (1,))))
        draw = _fmix32(_fmix32(self.key[0] ^ _fmix32(self.counter & _MASK32)) ^ self.key[1])
        with torch.no_grad():
            self.counter.add_(1)
        index = torch.arange(like.numel(), device=like.device).reshape(like.shape)
        bits = _fmix32(_fmix32(index ^ draw) ^ (draw >> 7)) >> (32 - _FLOAT_BITS)
        return ((bits.to(torch.float32) + 0.5) * 2.0 ** -_FLOAT_BITS).to(like.dtype)

    def gumbel_like(self, like: Tensor) -> Tensor:
        """Standard Gumbel(0, 1) noise ``-log(-log U)``, shaped like ``like``."""
        return -torch.log(-torch.log(self.uniform_like(like)))


class Dropout(nn.Module):
    """``torch.nn.Dropout`` (zero each element with probability ``p``, scale the rest by
    ``1 / (1 - p)``; the identity in eval mode) with masks from its own :class:`NoiseSource`,
    so a model with dropout trains batched exactly as in the loop.

    Args:
        p: the probability of zeroing an element, in [0, 1).
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        self.noise = NoiseSource()

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return x
        keep = self.noise.uniform_like(x) >= self.p
        return x * keep.to(x.dtype) / (1 - self.p)


def reseed_noise(module: nn.Module, seed: int) -> None:
    """Key every :class:`NoiseSource` of ``module`` from ``seed`` (each its own stream, by its
    position among the module's sources)."""
    sources = (m for m in module.modules() if isinstance(m, NoiseSource))
    for index, source in enumerate(sources):
        source.reseed(derive_seed(seed, index))


__all__ = ["Dropout", "NoiseSource", "reseed_noise"]
