"""One GPFL client's local round in PFLlib and in fedlight, from the same weights, conditional
inputs and batches: do both end at the same parameters?

A check of the local update alone (the loss terms, their weights, the optimizers and weight
decays), with everything between rounds left out: PFLlib's own ``clientGPFL.train`` runs on a
fixed list of batches (its ``load_train_data`` returns them), fedlight's ``GPFL`` takes the
same batches through its ``training_step`` and ``configure_optimizers``. Both start from the
same 4-layer CNN, CoV and GCE (PFLlib's initial ones, copied into fedlight's modules); the
conditional inputs come from that table in both (PFLlib's ``set_GCE``, fedlight's round start).

Printed: the largest absolute difference of each module's parameters after the round, once
with ``p_k`` as the authors' code builds it (not divided by the number of classes U, the form
fedlight's PFLlib comparison runs) and once with the paper's form (fedlight's default), which
must differ (the check can fail).

    python benchmarks/gpfl_local_round_vs_pfllib.py ../PFLlib [--classes 100] [--steps 22]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from fedlight.clients import GPFL, ClientContext

FEATURES, LR, MU, LAMDA, BATCH = 512, 0.005, 0.1, 0.01, 10


def pfllib_client(system: Path, classes: int, batches: list[Any]) -> Any:
    """PFLlib's ``clientGPFL`` (its model, CoV and GCE as its server builds them) training
    on ``batches``, its conditional inputs set from its initial table."""
    sys.path.insert(0, str(system))
    from flcore.clients.clientgpfl import clientGPFL
    from flcore.servers.servergpfl import GCE, CoV
    from flcore.trainmodel.models import BaseHeadSplit, FedAvgCNN

    class FixedBatches(clientGPFL):
        def load_train_data(self, batch_size: int | None = None) -> list[Any]:
            return batches

    torch.manual_seed(0)
    model = FedAvgCNN(in_features=3, num_classes=classes, dim=1600)
    head = copy.deepcopy(model.fc)
    model.fc = nn.Identity()
    args = SimpleNamespace(
        model=BaseHeadSplit(model, head), algorithm="GPFL", dataset="fixed", device="cpu",
        save_folder_name="", num_classes=classes, batch_size=BATCH, local_learning_rate=LR,
        local_epochs=1, few_shot=0, learning_rate_decay=False, learning_rate_decay_gamma=0.99,
        lamda=LAMDA, mu=MU, GCE=GCE(FEATURES, classes, "cpu"), CoV=CoV(FEATURES))
    samples = sum(len(y) for _, y in batches)
    client = FixedBatches(args, 0, samples, 0, train_slow=False, send_slow=False)
    client.set_GCE(args.GCE)
    return client


def pfllib_modules(client: Any) -> dict[str, list[nn.Parameter]]:
    cov = client.CoV
    return {"encoder": list(client.model.base.parameters()),
            "head": list(client.model.head.parameters()),
            "CoV": [*cov.Conditional_gamma.parameters(), *cov.Conditional_beta.parameters()],
            "GCE": list(client.GCE.parameters())}


def fedlight_modules(client: GPFL) -> dict[str, list[nn.Parameter]]:
    assert client.cov is not None and client.gce is not None
    return {"encoder": list(client.model.encoder.parameters()),
            "head": list(client.model.head.parameters()),
            "CoV": [*client.cov.gamma.parameters(), *client.cov.beta.parameters()],
            "GCE": list(client.gce.parameters())}


def fedlight_round(start: dict[str, list[nn.Parameter]], classes: int, batches: list[Any],
                   divide: bool) -> GPFL:
    """fedlight's GPFL from the parameters ``start``, one local round on ``batches``."""
    client = GPFL(backbone="cnn", num_classes=classes, input_shape=(3, 32, 32), lr=LR,
                  lamda=LAMDA, mu=MU, p_divide_by_classes=divide)
    with torch.no_grad():
        for name, params in fedlight_modules(client).items():
            for target, source in zip(params, start[name], strict=True):
                target.copy_(source)
    counts = torch.bincount(torch.cat([y for _, y in batches]), minlength=classes).float()
    client.context = ClientContext(client_id=0, round=0, rounds=1, join_ratio=1.0,
                                   class_counts=counts)
    client.on_round_start(0, {})
    optimizer = client.configure_optimizers()
    for index, batch in enumerate(batches):
        optimizer.zero_grad()
        client.training_step(batch, index).backward()
        optimizer.step()
    return client


def skewed_batches(classes: int, steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` batches of 10 random images whose labels cover a tenth of the classes."""
    generator = torch.Generator().manual_seed(1)
    present = torch.randperm(classes, generator=generator)[:max(1, classes // 10)]
    return [(torch.randn(BATCH, 3, 32, 32, generator=generator),
             present[torch.randint(len(present), (BATCH,), generator=generator)])
            for _ in range(steps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pfllib", type=Path, help="PFLlib's repository root")
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--steps", type=int, default=22,
                        help="batches in the round (22: 225 training images at batch 10)")
    options = parser.parse_args()
    torch.set_num_threads(1)
    batches = skewed_batches(options.classes, options.steps)
    client = pfllib_client(options.pfllib / "system", options.classes, batches)
    start = {name: [p.detach().clone() for p in params]
             for name, params in pfllib_modules(client).items()}
    client.train()
    ended = pfllib_modules(client)
    print(f"GPFL, {options.classes} classes, one local round of {options.steps} steps "
          f"(batch {BATCH}, lr {LR}, lamda {LAMDA}, mu {MU}) from PFLlib's initial weights")
    for divide, form in ((False, "p_k not divided by U (authors' code)"),
                         (True, "p_k divided by U (paper, fedlight's default)")):
        ours = fedlight_modules(fedlight_round(start, options.classes, batches, divide))
        moved = {name: max((e - s).abs().max().item() for e, s in zip(ended[name], start[name],
                                                                         strict=True))
                 for name in ended}
        gaps = {name: max((o - e).abs().max().item() for o, e in zip(ours[name], ended[name],
                                                                       strict=True))
                for name in ended}
        print(f"fedlight with {form}:")
        for name in ended:
            print(f"  {name:8s} largest change in the round {moved[name]:.3e}, "
                  f"largest |fedlight - PFLlib| after it {gaps[name]:.3e}")


if __name__ == "__main__":
    main()
