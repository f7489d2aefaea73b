"""Client-level differential privacy: DP-FedAvg's clip-and-noise, as a wrapper around any
mean-type server rule, with an accountant.

McMahan, Ramage, Talwar and Zhang, "Learning Differentially Private Recurrent Language
Models", ICLR 2018 (arXiv:1710.06963). Every participant's update Delta_k = uploaded -
received (the shared partition only) is clipped to L2 norm at most S:

    Delta_k <- Delta_k * min(1, S / ||Delta_k||)

the server adds Gaussian noise N(0, (z S)^2 I) to the SUM of the clipped updates and divides
by the number of participants n (the paper's fixed-denominator estimator with uniform
weights w_k = 1), then applies the result to the state it sent:

    new = received + (sum_k Delta_k + N(0, (z S)^2 I)) / n

Adding or removing one client changes the sum by at most S, so each round is a Gaussian
mechanism with noise multiplier z; the privacy spent over T rounds, epsilon at a
given delta, comes from Google's dp-accounting RDP accountant composing T
Poisson-subsampled Gaussian mechanisms with sampling rate q = join_ratio.

As a server rule, DPFedAvg replaces how the round's mean is formed (clipped updates,
noised sum, fixed denominator) and hands the resulting state to the wrapped rule's apply:
around WeightedMean (the default) this is DP-FedAvg;
around FedAdam / FedAvgM the server optimizer steps along the privatized pseudo-gradient
(DP-FedAdam, as in Reddi et al.'s and McMahan et al.'s compositions). The guarantee is the same,
since the optimizer only post-processes the noised mean.

Choices and caveats, stated once:

* **Uniform weighting only.** Sample-count weights would let one client's update weigh more
  than S / n and break the sensitivity bound, so DP with weighting="samples" is refused
  (DPFedAvg refuses it before training); pass trainer.weighting: uniform.
* **Sampling.** fedlight samples a fixed number round(q N) of clients per round without
  replacement; the accountant assumes Poisson sampling with rate q. Using the Poisson
  analysis for fixed-size sampling is the standard approximation (as in DP-FedAvg's own
  experiments); with fixed-size sampling n = qN every round, so the fixed denominator
  qN of the paper is the participant count. q = 1 (everyone, every round) gets no
  amplification by sampling.
* **What is protected.** The floating-point tensors of the shared partition. Integer buffers
  (BatchNorm's num_batches_tracked) are averaged without clipping or noise; private
  parameters never leave the client and are never touched; non-parameter payloads of a method
  (e.g. prototypes) are NOT covered by the guarantee.
* **Secure aggregation** (fedlight flower with secure-aggregation, fedlight.flower.secure).
  The server sees only the mean of the updates, so each client clips its own update to S
  before masking; this rule then receives that mean from every participant, whose update
  already has norm <= S (clipping it again changes nothing beyond quantization), and adds the
  noise to the sum as above: the released model keeps the guarantee; the server itself sees
  the sum of clipped updates before the noise.
* **Noise seeding.** The noise of round r comes from a CPU generator seeded by
  (seed, r) (noise_generator), independent of the clients' streams, so runs are
  reproducible on any device.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Iterator, Mapping

import numpy as np
import torch
from torch import Tensor

from fedlight.core.errors import ConfigError
from fedlight.core.rules import (
    Collectives,
    Report,
    ServerContext,
    ServerRule,
    State,
)
from fedlight.server.mean import WeightedMean

_DP_STREAM = 0x44505F4E  # tags the noise stream apart from the (seed, round, client) streams


class ClientLevelDP:
    """DP-FedAvg's clipping, noising and accounting (McMahan et al., ICLR 2018).

    Args:
        clip_norm: S, the L2 bound of each client's update over the whole shared partition.
        noise_multiplier: z; the noise added to the sum of clipped updates has standard
            deviation z * S per coordinate. 0 = clipping only (no privacy guarantee).
        delta: the delta at which epsilon is reported.

    Raises:
        ValueError: clip_norm <= 0, noise_multiplier < 0 or delta not in (0, 1).
    """

    def __init__(self, clip_norm: float, noise_multiplier: float, delta: float = 1e-5) -> None:
        if not clip_norm > 0:
            raise ConfigError(f"clip_norm must be positive, got {clip_norm}")
        if not noise_multiplier >= 0:
            raise ConfigError(f"noise_multiplier must be >= 0, got {noise_multiplier}")
        if not 0 < delta < 1:
            raise ConfigError(f"delta must be in (0, 1), got {delta}")
        self.clip_norm = float(clip_norm)
        self.noise_multiplier = float(noise_multiplier)
        self.delta = float(delta)

    @property
    def noise_std(self) -> float:
        """Standard deviation z * S of the noise added to the sum of clipped updates."""
        return self.noise_multiplier * self.clip_norm

    def clip(self, update: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """update scaled by min(1, S / ||update||), the norm taken over all its floating
        tensors together; other tensors (integer buffers) are returned unchanged."""
        norm = update_norm(update)
        factor = min(1.0, self.clip_norm / norm) if norm > 0 else 1.0
        return {k: v * factor if v.is_floating_point() else v for k, v in update.items()}

    def noisy_mean(self, sum_of_clipped: Mapping[str, Tensor], num_participants: int,
                   generator: torch.Generator) -> dict[str, Tensor]:
        """(sum + N(0, (z S)^2)) / num_participants on floating tensors (noise drawn on the
        CPU from generator, in key order); integer tensors get the plain rounded mean."""
        if num_participants < 1:
            raise ValueError(f"num_participants must be at least 1, got {num_participants}")
        result = {}
        for key, total in sum_of_clipped.items():
            if total.is_floating_point():
                noise = torch.randn(total.shape, generator=generator, dtype=torch.float64)
                noisy = total.double() + self.noise_std * noise.to(total.device)
                result[key] = (noisy / num_participants).to(total.dtype)
            else:
                result[key] = torch.round(total.double() / num_participants).to(total.dtype)
        return result

    def epsilon(self, rounds: int, sample_rate: float) -> float:
        """epsilon spent after rounds rounds with client sampling rate sample_rate,
        at delta, by the dp-accounting RDP accountant (Poisson-subsampled Gaussian);
        inf without noise, 0 after no round."""
        if rounds < 0 or not 0 < sample_rate <= 1:
            raise ValueError(f"need rounds >= 0 and sample_rate in (0, 1], got {rounds}, "
                             f"{sample_rate}")
        if rounds == 0:
            return 0.0
        if self.noise_multiplier == 0:
            return math.inf
        return _rdp_epsilon(self.noise_multiplier, float(sample_rate), int(rounds), self.delta)

    def summary(self, rounds: int, sample_rate: float) -> dict[str, float | None]:
        """The settings and dp_epsilon after rounds rounds, for summary.json
        (dp_epsilon is None when it is infinite, i.e. without noise)."""
        epsilon = self.epsilon(rounds, sample_rate)
        return {"dp_epsilon": epsilon if math.isfinite(epsilon) else None,
                "dp_delta": self.delta, "dp_clip_norm": self.clip_norm,
                "dp_noise_multiplier": self.noise_multiplier, "dp_sample_rate": sample_rate}

    def accumulator(self, reference: Mapping[str, Tensor],
                    generator: torch.Generator) -> DPSum:
        """A running server rule for one round: see DPSum."""
        return DPSum(self, reference, generator)


class DPSum:
    """The server's running state for one DP round, a drop-in for
    fedlight.federation.aggregate.WeightedSum: add(state, weight) clips
    state - reference and sums it (weight must be 1: uniform weighting), mean()
    returns reference + noisy_mean(sum) with each tensor in its original dtype."""

    def __init__(self, dp: ClientLevelDP, reference: Mapping[str, Tensor],
                 generator: torch.Generator) -> None:
        self.dp = dp
        self.reference = dict(reference)
        self.generator = generator
        self.sums: dict[str, Tensor] = {}
        self.count = 0
        self.norms: list[float] = []  # each update's norm before clipping

    def add(self, state: Mapping[str, Tensor], weight: float = 1.0) -> None:
        if weight != 1.0:
            raise ValueError(f"client-level DP needs uniform weights, got weight {weight}")
        if set(state) != set(self.reference):
            raise ValueError("the upload's keys differ from the shared state sent")
        update = {k: _difference(v.detach(), self.reference[k]) for k, v in state.items()}
        self.norms.append(update_norm(update))
        for key, value in self.dp.clip(update).items():
            self.sums[key] = self.sums[key] + value if key in self.sums else value
        self.count += 1

    def mean(self) -> dict[str, Tensor]:
        if self.count == 0:
            return {}
        step = self.dp.noisy_mean(self.sums, self.count, self.generator)
        result = {}
        for key, ref in self.reference.items():
            value = ref.double() + step[key]
            result[key] = value.to(ref.dtype) if ref.is_floating_point() else (
                value.round().to(ref.dtype))
        return result


def _difference(value: Tensor, reference: Tensor) -> Tensor:
    """value - reference in float64 for floating tensors, exactly in int64 otherwise."""
    if reference.is_floating_point():
        return value.double() - reference.double()
    return value.long() - reference.long()


def update_norm(update: Mapping[str, Tensor]) -> float:
    """L2 norm of all floating tensors of update taken together."""
    squares = [v.detach().double().pow(2).sum() for v in update.values() if v.is_floating_point()]
    return float(torch.stack(squares).sum().sqrt()) if squares else 0.0


def noise_generator(seed: int, round_idx: int) -> torch.Generator:
    """The CPU generator of round round_idx's noise, a pure function of (seed, round)."""
    state = np.random.SeedSequence([int(seed), int(round_idx), _DP_STREAM]).generate_state(
        2, np.uint64)
    return torch.Generator().manual_seed(int(state[0] >> 1))


@contextlib.contextmanager
def _quiet_absl() -> Iterator[None]:
    """dp-accounting logs a warning per fractional RDP order it skips; silence them."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@functools.lru_cache(maxsize=4096)
def _rdp_epsilon(noise_multiplier: float, sample_rate: float, rounds: int, delta: float) -> float:
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant

    event: dp_accounting.DpEvent = dp_accounting.GaussianDpEvent(noise_multiplier)
    if sample_rate < 1:
        event = dp_accounting.PoissonSampledDpEvent(sample_rate, event)
    accountant = rdp_privacy_accountant.RdpAccountant()
    with _quiet_absl():
        accountant.compose(event, rounds)
        return float(accountant.get_epsilon(delta))


class DPFedAvg(ServerRule):
    """Client-level DP around a mean-type rule (DP-FedAvg, McMahan et al., ICLR 2018).

    server: DPFedAvg wraps the method's own mean rule; init_args.rule names another
    mean-type rule to wrap (e.g. FedAdam). Needs trainer.weighting: uniform. Logs
    dp_epsilon each evaluated round and writes the settings and the final epsilon into
    summary.json.

    Args:
        clip_norm: S, the L2 bound of each client's update over the whole shared partition.
        noise_multiplier: z; noise std on the sum of clipped updates is z * S
            (0 = clipping only, no guarantee).
        delta: the delta at which epsilon is reported.
        rule: the mean-type rule whose apply turns the privatized mean into the next
            global state; default: the client's own rule.
    """

    replaceable = True

    def __init__(self, clip_norm: float, noise_multiplier: float = 0.0, delta: float = 1e-5,
                 rule: WeightedMean | None = None) -> None:
        self.rule = rule  # first: the base constructor sets the proxied global state
        super().__init__()
        self.dp = ClientLevelDP(clip_norm, noise_multiplier, delta)
        self.total: DPSum | None = None

    # The wrapped rule owns the global state and message; this wrapper only forms the mean.
    @property  # type: ignore[override]
    def global_state(self) -> State:
        return self.rule.global_state if self.rule is not None else {}

    @global_state.setter
    def global_state(self, value: State) -> None:
        if self.rule is not None:
            self.rule.global_state = value

    @property  # type: ignore[override]
    def message(self) -> dict:
        return self.rule.message if self.rule is not None else {}

    @message.setter
    def message(self, value: dict) -> None:
        if self.rule is not None:
            self.rule.message = value

    def wrap_default(self, default: ServerRule) -> ServerRule:
        if self.rule is None:
            if not isinstance(default, WeightedMean):
                raise ConfigError(f"DPFedAvg wraps a mean-type rule; the method's rule "
                                 f"{type(default).__name__} is not one")
            self.rule = default
        return self

    def setup(self, initial_state: State, context: ServerContext) -> None:
        if context.weighting != "uniform":
            raise ConfigError(f"client-level DP needs trainer.weighting: uniform (got "
                             f"{context.weighting!r}): sample-count weights would break the "
                             "per-client sensitivity bound")
        if self.rule is None:
            self.rule = WeightedMean()
        self.rule.setup(initial_state, context)
        self.context = context

    def download(self, client_id: int) -> tuple[State, dict]:
        return self.rule.download(client_id)

    def begin_round(self, round_idx: int) -> None:
        self.rule.begin_round(round_idx)
        seed = self.context.seed if self.context else 0
        self.total = self.dp.accumulator(self.global_state, noise_generator(seed, round_idx))

    def add(self, report: Report) -> None:
        self.total.add(report.state, report.weight)

    def end_round(self, collectives: Collectives) -> None:
        collectives.reduce_sum(self.total)
        if self.total.count:
            self.global_state = self.rule.apply(self.total.mean())

    def round_metrics(self, rounds_done: int) -> dict[str, float]:
        return {"dp_epsilon": self.dp.epsilon(rounds_done, self.context.join_ratio)}

    def summary(self, rounds_done: int) -> dict:
        return self.dp.summary(rounds_done, self.context.join_ratio)

    def state_dict(self) -> dict:
        return self.rule.state_dict()

    def load_state_dict(self, state: Mapping) -> None:
        self.rule.load_state_dict(state)

    def to(self, device: torch.device) -> DPFedAvg:
        self.rule.to(device)
        return self


__all__ = ["ClientLevelDP", "DPFedAvg", "DPSum", "noise_generator", "update_norm"]
