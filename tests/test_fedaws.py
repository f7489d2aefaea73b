"""FedAwS: the spreadout regularizer and the server's step on the class embeddings."""

from __future__ import annotations

import pytest
import torch

from fedlight.clients.fedaws import FedAwS, SpreadoutMean, spreadout
from fedlight.core.rules import Report, ServerContext, SingleProcess


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"margin": 0.0}, "margin must be positive, got 0.0"),
    ({"spreadout_steps": 0}, "spreadout_steps must be at least 1, got 0"),
])
def test_bad_constructor_values_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FedAwS(backbone="mlp", num_classes=4, input_shape=(1, 8, 8), **kwargs)


def test_spreadout_is_the_squared_hinge_over_ordered_pairs():
    w = torch.tensor([[0.0, 0.0], [0.5, 0.0], [3.0, 0.0]])
    assert spreadout(w, 1.0).item() == pytest.approx(2 * 0.5**2)


def test_server_pushes_close_class_embeddings_apart_after_the_mean():
    rule = SpreadoutMean("head", weight=1.0, margin=1.0, lr=0.1, steps=1)
    rule.setup({"head": torch.zeros(2, 2), "b": torch.zeros(1)},
               ServerContext(num_clients=2, rounds=1, join_ratio=1.0))
    rule.begin_round(0)
    rule.add(Report(0, {"head": torch.tensor([[0.0, 0.0], [1.0, 0.0]]),
                        "b": torch.tensor([1.0])}, 1.0))
    rule.add(Report(1, {"head": torch.tensor([[0.0, 0.0], [0.0, 0.0]]),
                        "b": torch.tensor([3.0])}, 1.0))
    rule.end_round(SingleProcess())
    # mean rows (0, 0) and (0.5, 0): d = 0.5, each ordered pair adds 2 (1 - d) = 1 to the push
    torch.testing.assert_close(rule.global_state["head"],
                               torch.tensor([[-0.2, 0.0], [0.7, 0.0]]))
    torch.testing.assert_close(rule.global_state["b"], torch.tensor([2.0]))


def test_missing_embedding_key_is_named():
    rule = SpreadoutMean("model.head.weight")
    with pytest.raises(ValueError, match="'model.head.weight' are not in the shared state"):
        rule.setup({"w": torch.zeros(1)}, ServerContext(num_clients=1, rounds=1, join_ratio=1))
