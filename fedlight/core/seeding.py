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
_JOIN_STREAM = 0x4A4F494E  # tags the random join ratio's stream apart from the sampling stream


def derive_seed(*parts: int) -> int:
    """A 63-bit seed that is a pure function of the integer ``parts``."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, np.uint64)[0] >> 1)


def fewest_participants(num_clients: int, join_ratio: float) -> int:
    """``max(1, round(join_ratio * N))``, at most N: the clients of a round at ``join_ratio``."""
    return min(num_clients, max(1, int(round(join_ratio * num_clients))))


def participant_count(num_clients: int, join_ratio: float, seed: int, round_idx: int,
                      random_join_ratio: bool = False) -> int:
    """How many clients train in a round: :func:`fewest_participants`; with
    ``random_join_ratio`` a count drawn uniformly from that many up to ``N`` (both included)
    by a generator seeded by ``(seed, round)`` on its own stream, as PFLlib's
    ``random_join_ratio`` draws it (its lower end is ``int(join_ratio * N)``)."""
    low = fewest_participants(num_clients, join_ratio)
    if not random_join_ratio or low >= num_clients:
        return low
    rng = np.random.default_rng([int(seed), int(round_idx), _JOIN_STREAM])
    return int(rng.integers(low, num_clients + 1))


def mean_join_ratio(num_clients: int, join_ratio: float, random_join_ratio: bool = False
                    ) -> float:
    """The share of clients a round samples on average, as the clients' and the server rule's
    context give it: ``join_ratio``, or with ``random_join_ratio`` the mean of
    :func:`participant_count` over N."""
    if not random_join_ratio:
        return join_ratio
    return (fewest_participants(num_clients, join_ratio) + num_clients) / (2 * num_clients)


def sample_clients(num_clients: int, join_ratio: float, seed: int, round_idx: int,
                   random_join_ratio: bool = False) -> list[int]:
    """The clients of a round: :func:`participant_count` of them drawn without replacement
    from a generator seeded by ``(seed, round)``, sorted."""
    count = participant_count(num_clients, join_ratio, seed, round_idx, random_join_ratio)
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


__all__ = ["derive_seed", "drop_clients", "fewest_participants", "mean_join_ratio",
           "participant_count", "sample_clients", "seed_global_rngs"]
