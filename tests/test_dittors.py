"""DittoRS: Ditto's global phase with the restricted softmax, its personal phase untouched."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fedlight.clients import ClientContext, Ditto
from fedlight.clients.dittors import DittoRS


def make(cls=DittoRS, **kwargs):
    torch.manual_seed(0)
    client = cls(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8), "lr": 0.1,
                    **kwargs})
    client.context = ClientContext(client_id=0, round=0, rounds=1, join_ratio=1.0,
                                   class_counts=torch.tensor([5, 3, 0, 0]))
    client.on_round_start(0, {})
    return client


def batch():
    torch.manual_seed(1)
    return torch.randn(6, 1, 8, 8), torch.tensor([0, 1, 0, 1, 0, 1])


def test_bad_rs_alpha_is_named():
    with pytest.raises(ValueError, match=r"rs_alpha must be in \[0, 1\], got 2.0"):
        make(rs_alpha=2.0)


def test_global_phase_restricts_missing_classes_and_personal_phase_is_dittos():
    x, y = batch()
    client, ditto = make(rs_alpha=0.5), make(Ditto)
    client.phase = ditto.phase = "global"
    scales = torch.tensor([1.0, 1.0, 0.5, 0.5])
    expected = F.cross_entropy(client.model(x) * scales, y)
    torch.testing.assert_close(client.training_step((x, y), 0), expected)
    assert not torch.allclose(expected, ditto.training_step((x, y), 0))
    client.phase = ditto.phase = "personal"
    torch.testing.assert_close(client.training_step((x, y), 0), ditto.training_step((x, y), 0))


def test_alpha_zero_sends_no_gradient_to_missing_class_rows():
    x, y = batch()
    client = make(rs_alpha=0.0)
    client.phase = "global"
    client.training_step((x, y), 0).backward()
    head = client.model.head.weight.grad
    assert not head[2:].any() and head[:2].any()
