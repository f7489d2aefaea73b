"""Seeding: every random draw of a run is a pure function of the run's seed, the round and the
client (which clients train in a round, which of them fail to report, a client's own seed), so
every process draws the same, a resumed run needs no RNG state, and a client trains the same
whichever process or engine runs it."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

_DROP_STREAM = 0x44524F50  # tags the dropout stream apart from the sampling stream


def derive_seed(*parts: int) -> int:
    """A 63-bit seed that is a pure function of the integer ``parts``."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, np.uint64)[0] >> 1)


def sample_clients(num_clients: int, join_ratio: float, seed: int, round_idx: int) -> list[int]:
    """The clients of a round: ``max(1, round(join_ratio * N))`` drawn without replacement from a
    generator seeded by ``(seed, round)``, sorted."""
    count = max(1, int(round(join_ratio * num_clients)))
    if count >= num_clients:
        return list(range(num_clients))
    rng = np.random.default_rng([seed, round_idx])
    return sorted(int(c) for c in rng.choice(num_clients, size=count, replace=False))


def drop_clients(participants: Sequence[int], drop_rate: float, seed: int,
                 round_idx: int) -> list[int]:
    """The sampled clients that train but fail to report this round (sorted).

    As PFLlib's ``client_drop_rate``: ``floor((1 - drop_rate) * n)`` of the ``n`` sampled
    clients report, at least one; the others are drawn without replacement from a generator
    seeded by ``(seed, round)`` on its own stream, so the sampled clients do not change with
    ``drop_rate`` and every process draws the same ones.
    """
    count = len(participants)
    if drop_rate <= 0 or count < 2:
        return []
    survivors = max(1, math.floor((1.0 - drop_rate) * count + 1e-9))
    rng = np.random.default_rng([int(seed), int(round_idx), _DROP_STREAM])
    chosen = rng.choice(np.asarray(participants), size=count - survivors, replace=False)
    return sorted(int(c) for c in chosen)


def seed_global_rngs(seed: int, device: torch.device) -> None:
    """Seed the global generators a client's training on ``device`` draws from (the CPU one,
    and the accelerator's): the same streams as ``torch.manual_seed(seed)`` there.

    Why not torch.manual_seed: on a machine where CUDA (or another accelerator backend) is
    present but not initialized, every call also queues a lazy seeding call per backend with
    a captured stack trace, ~1 ms per call: a measurable share of a small client's round."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed_all(seed)
    elif device.type != "cpu":
        torch.manual_seed(seed)


__all__ = ["derive_seed", "drop_clients", "sample_clients", "seed_global_rngs"]
