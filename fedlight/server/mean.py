"""The weighted mean of the shared states: FedAvg's server rule and every method's default.

McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized Data",
AISTATS 2017: x^{t+1} = sum_k w_k x_k / sum_k w_k over the reports of the round, with
w_k the client's sample count (or 1 under trainer.weighting: uniform).
"""

from __future__ import annotations

from fedlight.core.rules import Collectives, Report, ServerRule, State, WeightedSum


class WeightedMean(ServerRule):
    """FedAvg: the next global state is the weighted mean of the reported shared states.

    Streaming: one float64 running sum (O(model) memory however many clients report); with
    several processes the partial sums are all-reduced before the one division.

    It is also the base of every *mean-type* rule: a subclass overrides apply to turn
    the round's mean into the next global state (server optimizers), and the DP wrapper
    replaces how the mean is formed (clipped, noised) but keeps apply.
    """

    replaceable = True

    def __init__(self) -> None:
        super().__init__()
        self.total = WeightedSum()

    def begin_round(self, round_idx: int) -> None:
        self.total = WeightedSum()

    def add(self, report: Report) -> None:
        self.total.add(report.state, report.weight)

    def end_round(self, collectives: Collectives) -> None:
        collectives.reduce_sum(self.total)
        if self.total.count:  # a round where nobody reported keeps the state
            self.global_state = self.apply(self.total.mean())

    def apply(self, mean: State) -> State:
        """The next global state given the round's mean of reports. FedAvg: the mean."""
        return mean


__all__ = ["WeightedMean"]
