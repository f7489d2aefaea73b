import pytest
import torch

from fedlight.core.messages import state_bytes
from fedlight.core.rules import WeightedSum, aggregation_weight, weighted_mean


def test_weighted_mean_matches_hand_computed_values():
    a = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor(0.0)}
    b = {"w": torch.tensor([3.0, 6.0]), "b": torch.tensor(4.0)}
    mean = weighted_mean([a, b], [1.0, 3.0])
    # (1*1 + 3*3) / 4 = 2.5, (1*2 + 3*6) / 4 = 5, (0 + 12) / 4 = 3
    assert torch.equal(mean["w"], torch.tensor([2.5, 5.0]))
    assert torch.equal(mean["b"], torch.tensor(3.0))


def test_integer_buffers_are_averaged_and_rounded_back_to_their_dtype():
    a = {"num_batches_tracked": torch.tensor(10, dtype=torch.long)}
    b = {"num_batches_tracked": torch.tensor(13, dtype=torch.long)}
    mean = weighted_mean([a, b], [1.0, 1.0])
    assert mean["num_batches_tracked"].dtype == torch.long
    assert mean["num_batches_tracked"].item() == 12  # 11.5 rounds to even


def test_aggregating_identical_states_returns_that_state():
    torch.manual_seed(0)
    state = {"w": torch.randn(5, 3), "running_var": torch.rand(3), "n": torch.tensor(7)}
    mean = weighted_mean([state] * 3, [5.0, 1.0, 2.0])
    for key, value in state.items():
        assert torch.allclose(mean[key], value) and mean[key].dtype == value.dtype


def test_half_precision_is_accumulated_in_higher_precision():
    states = [{"w": torch.full((4,), 1000.0, dtype=torch.float16)} for _ in range(100)]
    assert weighted_mean(states, [1.0] * 100)["w"].dtype == torch.float16
    assert torch.equal(weighted_mean(states, [1.0] * 100)["w"], states[0]["w"])


def test_weighted_sum_rejects_bad_input():
    total = WeightedSum()
    with pytest.raises(ValueError, match="-1"):
        total.add({"w": torch.ones(1)}, -1)
    total.add({"w": torch.ones(1)}, 1)
    with pytest.raises(ValueError, match="same keys"):
        total.add({"v": torch.ones(1)}, 1)
    zero = WeightedSum()
    zero.add({"w": torch.ones(1)}, 0.0)
    with pytest.raises(ValueError, match="zero"):
        zero.mean()
    assert WeightedSum().mean() == {}


def test_aggregation_weight():
    assert aggregation_weight(3, "samples") == 3.0
    assert aggregation_weight(5, "uniform") == 1.0
    with pytest.raises(ValueError, match="'median'.*samples, uniform"):
        aggregation_weight(1, "median")


def test_state_bytes_counts_nested_tensors():
    message = {"w": torch.zeros(10), "protos": {0: torch.zeros(4, dtype=torch.float64)}}
    assert state_bytes(message) == 10 * 4 + 4 * 8


def test_adding_a_state_never_modifies_it():
    state = {"w": torch.ones(3, dtype=torch.float64), "v": torch.ones(2)}
    total = WeightedSum()
    total.add(state, 5.0)
    assert torch.equal(state["w"], torch.ones(3, dtype=torch.float64))
    assert torch.equal(state["v"], torch.ones(2))
