"""Byzantine-robust server rules: coordinate-wise median, trimmed mean, Krum / multi-Krum.

* Coordinate-wise median and trimmed mean: Yin, Chen, Kannan and Bartlett, "Byzantine-Robust
  Distributed Learning: Towards Optimal Statistical Rates", ICML 2018. Per coordinate, the
  median of the reports (the mean of the two middle values for an even count), or the mean
  after dropping the floor(trim_ratio * n) largest and smallest values.
* Krum / multi-Krum: Blanchard, El Mhamdi, Guerraoui and Stainer, "Machine Learning with
  Adversaries: Byzantine Tolerant Gradient Descent", NeurIPS 2017. Each report is scored by the
  sum of squared L2 distances (over all floating tensors of the shared state) to its
  n - f - 2 nearest other reports; Krum keeps the best one, multi-Krum the selected
  best and averages them with the reports' weights (uniform under trainer.weighting:
  uniform, the paper's form).

These rules are not linear, so they keep every report of the round (O(clients x model) memory,
inherent to them) and, with several processes, gather the reports in client-id order on every
process, which then computes the same result as one process. They ignore sample weights except
where said; integer buffers take the same rule and are rounded back.
"""

from __future__ import annotations

import math
from abc import abstractmethod

import torch
from torch import Tensor

from fedlight.core.errors import ConfigError
from fedlight.core.rules import Collectives, Report, ServerRule, State


class GatheringRule(ServerRule):
    """A rule that needs every report at once: keeps them, gathers them across processes in
    client order, and reduces them in combine."""

    replaceable = True

    def __init__(self) -> None:
        super().__init__()
        self.reports: dict[int, Report] = {}

    def begin_round(self, round_idx: int) -> None:
        self.reports = {}

    def add(self, report: Report) -> None:
        self.reports[report.client_id] = Report(
            report.client_id, {k: v.detach().clone() for k, v in report.state.items()},
            report.weight)

    def end_round(self, collectives: Collectives) -> None:
        reports = list(collectives.gather_by_client(self.reports).values())
        self.reports = {}
        if reports:
            self.global_state = self.combine(reports)

    @abstractmethod
    def combine(self, reports: list[Report]) -> State:
        """The next global state from every report of the round (in client order)."""


def _stacked(reports: list[Report], key: str) -> Tensor:
    return torch.stack([r.state[key].double() for r in reports])


def _cast(value: Tensor, like: Tensor) -> Tensor:
    return value.to(like.dtype) if like.is_floating_point() else value.round().to(like.dtype)


class CoordinateMedian(GatheringRule):
    """Coordinate-wise median of the reports (Yin et al., ICML 2018)."""

    def combine(self, reports: list[Report]) -> State:
        result = {}
        for key, like in reports[0].state.items():
            values = _stacked(reports, key).sort(dim=0).values
            n = values.shape[0]
            median = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
            result[key] = _cast(median, like)
        return result


class TrimmedMean(GatheringRule):
    """Coordinate-wise trimmed mean (Yin et al., ICML 2018).

    Args:
        trim_ratio: share beta of the reports dropped at EACH end per coordinate
            (floor(beta n) largest and as many smallest); in [0, 0.5).
    """

    def __init__(self, trim_ratio: float = 0.1) -> None:
        if not 0 <= trim_ratio < 0.5:
            raise ConfigError(f"trim_ratio must be in [0, 0.5), got {trim_ratio}")
        super().__init__()
        self.trim_ratio = float(trim_ratio)

    def combine(self, reports: list[Report]) -> State:
        n = len(reports)
        cut = math.floor(self.trim_ratio * n)
        result = {}
        for key, like in reports[0].state.items():
            values = _stacked(reports, key).sort(dim=0).values
            result[key] = _cast(values[cut:n - cut].mean(dim=0), like)
        return result


class Krum(GatheringRule):
    """Krum (selected=1) and multi-Krum (Blanchard et al., NeurIPS 2017).

    Args:
        byzantine: f, the number of reports that may be adversarial; needs
            n >= 2 f + 3 reports in a round.
        selected: m, how many best-scored reports are averaged (1 = Krum).
    """

    def __init__(self, byzantine: int = 1, selected: int = 1) -> None:
        if byzantine < 0:
            raise ConfigError(f"byzantine must be >= 0, got {byzantine}")
        if selected < 1:
            raise ConfigError(f"selected must be at least 1, got {selected}")
        super().__init__()
        self.byzantine = int(byzantine)
        self.selected = int(selected)

    def scores(self, reports: list[Report]) -> Tensor:
        """Each report's Krum score: sum of squared distances to its n - f - 2 nearest."""
        n = len(reports)
        if n < 2 * self.byzantine + 3:
            raise ConfigError(f"Krum with byzantine={self.byzantine} needs at least "
                             f"{2 * self.byzantine + 3} reports per round, got {n}; lower "
                             "byzantine or sample more clients (trainer.join_ratio)")
        flat = torch.stack([torch.cat([v.double().reshape(-1) for v in r.state.values()
                                       if v.is_floating_point()]) for r in reports])
        distances = torch.cdist(flat, flat).square()
        distances.fill_diagonal_(math.inf)
        nearest = distances.sort(dim=1).values[:, : n - self.byzantine - 2]
        return nearest.sum(dim=1)

    def combine(self, reports: list[Report]) -> State:
        order = self.scores(reports).argsort(stable=True)[: min(self.selected, len(reports))]
        chosen = [reports[int(i)] for i in order]
        weights = torch.tensor([r.weight for r in chosen], dtype=torch.float64)
        if not weights.sum() > 0:
            raise ValueError("the selected reports' weights sum to zero")
        result = {}
        for key, like in reports[0].state.items():
            values = _stacked(chosen, key)
            w = weights.to(values.device).reshape(-1, *[1] * (values.dim() - 1))
            result[key] = _cast((values * w).sum(0) / w.sum(), like)
        return result


__all__ = ["CoordinateMedian", "GatheringRule", "Krum", "TrimmedMean"]
