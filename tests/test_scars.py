"""ScaRS: SCAFFOLD's correction on the restricted-softmax loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedlight.clients import ClientContext
from fedlight.clients.scaffold import SCAFFOLD
from fedlight.clients.scars import ScaRS


def make(cls=ScaRS, **kwargs):
    torch.manual_seed(0)
    client = cls(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8), "lr": 0.1,
                    **kwargs})
    client.context = ClientContext(client_id=0, round=0, rounds=1, join_ratio=1.0,
                                   class_counts=torch.tensor([0, 3, 4, 0]))
    return client


def test_local_loss_is_restricted_and_alpha_one_is_scaffold():
    torch.manual_seed(1)
    x, y = torch.randn(6, 1, 8, 8), torch.tensor([1, 2, 1, 2, 1, 2])
    client = make(rs_alpha=0.3)
    expected = F.cross_entropy(client(x) * torch.tensor([0.3, 1.0, 1.0, 0.3]), y)
    torch.testing.assert_close(client.training_step((x, y), 0), expected)
    torch.testing.assert_close(make(rs_alpha=1.0).training_step((x, y), 0),
                               make(SCAFFOLD).training_step((x, y), 0))


def test_scaffold_correction_still_applies():
    client = make()
    c = {n: torch.full_like(p, 0.5) for n, p in client.named_parameters()}
    client.on_round_start(0, {"control": c})
    for p in client.parameters():
        p.grad = torch.ones_like(p)
    client.on_before_optimizer_step(torch.optim.SGD(client.parameters(), lr=0.1))
    assert all(torch.equal(p.grad, torch.full_like(p, 1.5)) for p in client.parameters())
    assert type(client.configure_server()).__name__ == "SCAFFOLDServer"
