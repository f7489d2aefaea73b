"""GPFL over several federated rounds in PFLlib and in fedlight, from the same initial weights,
on the same clients, with the same batches: do both score the same accuracy each round and end
at the same models?

Where the local update alone agrees (``benchmarks/gpfl_local_round_vs_pfllib.py``), this
checks everything between rounds as well: what the server aggregates and with which weights,
what each client receives and keeps, where the conditional inputs come from, how clients
are scored. PFLlib runs its own server and clients (``servers/servergpfl.GPFL``,
``clients/clientgpfl.clientGPFL``) by the steps of its ``train`` loop, its accuracy from its
``test_metrics``; fedlight runs its ``FederatedTrainer`` on the same folder (the ``pfllib``
source) from PFLlib's initial weights (``torch.manual_seed(0)``, as PFLlib's ``main.py``, or
``--init-seed``, then the model, GCE and CoV in the order its ``main.py`` and GPFL server build
them).

The clients: ``--folder``, a PFLlib dataset folder (e.g. one that ``fedlight
export-partition`` wrote for ``benchmarks/vs_pfllib.py``), or by default a small one written
here (random images, each client holding a tenth of the classes). Batches: PFLlib's client
reads its epoch's batches in the order fedlight draws them for that client and round
(``fedlight.data.iterate_batches`` with the generator of ``derive_seed(seed, round,
client)``), so the two see the same batches; the only change to PFLlib's client besides the
one below.

PFLlib's GPFL builds a client's conditional inputs from its own table of the round before
(zeros in round 0) where fedlight, as the paper's Algorithm 1, builds them from the table
received (``fedlight/clients/gpfl.py``); ``--pfllib-inputs received`` (default) runs PFLlib's
client with that one change (the change of
``vs_pfllib_three_seeds/pfllib_gpfl_received_table.patch``, made here by overriding
``set_GCE``), ``authors`` as it is. fedlight runs ``p_k`` as the authors' code builds it (not
divided by U).

    python benchmarks/gpfl_rounds_vs_pfllib.py ../PFLlib [--folder DIR] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch import nn

from fedlight.core.seeding import derive_seed
from fedlight.data.datamodule import iterate_batches
from fedlight.data.sources.pfllib import PFLlib

FEATURES, LR, MU, LAMDA, SEED = 512, 0.005, 0.1, 0.01, 0


def write_clients(folder: Path, clients: int, classes: int, train: int, test: int) -> None:
    """A PFLlib dataset folder: ``train/i.npz``, ``test/i.npz`` of random 3x32x32 images and
    its ``config.json``."""
    generator = np.random.default_rng(1)
    for split in ("train", "test"):
        (folder / split).mkdir(parents=True)
    for client in range(clients):
        present = generator.choice(classes, max(1, classes // 10), replace=False)
        for split, size in (("train", train), ("test", test)):
            x = generator.standard_normal((size, 3, 32, 32)).astype(np.float32)
            y = generator.choice(present, size).astype(np.int64)
            np.savez_compressed(folder / split / f"{client}.npz", data={"x": x, "y": y})
    (folder / "config.json").write_text(json.dumps({"num_clients": clients,
                                                    "num_classes": classes}))


def pfllib_server(system: Path, folder: Path, setup: dict[str, int], options: argparse.Namespace,
                  batch: int) -> Any:
    """PFLlib's GPFL server with its clients on ``folder`` (its arguments as main.py's for
    ``-algo GPFL -m CNN -lbs <batch> -lr 0.005 -ls <epochs> -jr 1 -lam 0.01 -mu 0.1``)."""
    sys.path.insert(0, str(system))
    from flcore.clients.clientgpfl import clientGPFL
    from flcore.servers import servergpfl
    from flcore.trainmodel.models import BaseHeadSplit, FedAvgCNN
    from utils.data_utils import read_client_data

    class FedlightBatchOrder(clientGPFL):
        """clientGPFL reading each epoch's batches in fedlight's order for its round."""

        round = 0

        def load_train_data(self, batch_size: int | None = None) -> list[Any]:
            data = read_client_data(self.dataset, self.id, is_train=True)
            x, y = torch.stack([s[0] for s in data]), torch.stack([s[1] for s in data])
            order = torch.Generator().manual_seed(derive_seed(SEED, self.round, self.id))
            return list(iterate_batches(x, y, batch_size or self.batch_size, order))

    class ReceivedTableInputs(FedlightBatchOrder):
        """... with its conditional inputs built from the table it receives."""

        def set_GCE(self, GCE: nn.Module) -> None:
            super().set_GCE(GCE)  # builds the inputs from its own table, then takes GCE's
            super().set_GCE(GCE)  # the inputs again, now from the table just received

    received = options.pfllib_inputs == "received"
    servergpfl.clientGPFL = ReceivedTableInputs if received else FedlightBatchOrder
    torch.manual_seed(options.init_seed)
    model = FedAvgCNN(in_features=3, num_classes=setup["classes"], dim=1600)
    head = copy.deepcopy(model.fc)
    model.fc = nn.Identity()
    args = SimpleNamespace(
        model=BaseHeadSplit(model, head), algorithm="GPFL", dataset=str(folder), device="cpu",
        num_classes=setup["classes"], global_rounds=0, local_epochs=options.epochs,
        batch_size=batch, local_learning_rate=LR, num_clients=setup["clients"], join_ratio=1.0,
        random_join_ratio=False, few_shot=0, time_select=False, goal="compare",
        time_threthold=10000, save_folder_name="items", top_cnt=100, auto_break=False,
        eval_gap=1, client_drop_rate=0.0, train_slow_rate=0.0, send_slow_rate=0.0,
        dlg_eval=False, dlg_gap=100, batch_num_per_client=2, num_new_clients=0,
        fine_tuning_epoch_new=0, learning_rate_decay=False, learning_rate_decay_gamma=0.99,
        lamda=LAMDA, mu=MU)
    with contextlib.redirect_stdout(io.StringIO()):  # its "Finished creating server" lines
        server = servergpfl.GPFL(args, 0)
    if received:  # round 0's inputs from the initial table too
        for client in server.clients:
            client.set_GCE(args.GCE)
    server.initial = {"base": copy.deepcopy(args.model.base), "head": copy.deepcopy(head),
                      "CoV": copy.deepcopy(args.CoV), "GCE": copy.deepcopy(args.GCE)}
    return server


def pfllib_rounds(server: Any, rounds: int) -> list[float]:
    """The steps of PFLlib's ``GPFL.train`` for ``rounds`` rounds; the accuracy of its
    ``test_metrics`` on the state after each round."""
    accuracies = []
    for round_idx in range(rounds):
        server.selected_clients = server.select_clients()
        for client in server.selected_clients:
            client.round = round_idx
            client.train()
        server.receive_models()
        server.aggregate_parameters()
        server.send_models()
        server.global_GCE()
        server.global_CoV()
        _, samples, correct, _ = server.test_metrics()
        accuracies.append(100 * sum(correct) / sum(samples))
    return accuracies


def fedlight_run(server: Any, folder: Path, setup: dict[str, int], options: argparse.Namespace,
                 root: Path) -> tuple[list[float], Any]:
    """fedlight's GPFL from PFLlib's initial weights on ``folder``: the personalized accuracy
    after each round, and the trainer."""
    from fedlight.clients import GPFL
    from fedlight.data import FederatedDataModule
    from fedlight.federation.trainer import FederatedTrainer

    client = GPFL(backbone="cnn", num_classes=setup["classes"], input_shape=(3, 32, 32),
                  lr=LR, lamda=LAMDA, mu=MU, p_divide_by_classes=False)
    assert client.cov is not None and client.gce is not None
    initial = server.initial
    pairs = ((client.model.encoder, initial["base"]), (client.model.head, initial["head"]),
             (client.cov.gamma, initial["CoV"].Conditional_gamma),
             (client.cov.beta, initial["CoV"].Conditional_beta), (client.gce, initial["GCE"]))
    with torch.no_grad():  # the same layers in the same order under other names
        for target, source in pairs:
            for mine, theirs in zip(target.parameters(), source.parameters(), strict=True):
                mine.copy_(theirs)
    data = FederatedDataModule(source=PFLlib(root=str(folder)), num_clients=setup["clients"])
    trainer = FederatedTrainer(rounds=options.rounds, local_epochs=options.epochs,
                               batch_size=setup["batch"], accelerator="cpu", devices=1,
                               default_root_dir=str(root), progress_bar=False, logger="csv",
                               checkpoint_every=1000, seed=SEED, reinitialize=False)
    with contextlib.redirect_stdout(io.StringIO()):  # its run summary
        trainer.fit(client, data)
    return [100 * row["personalized_accuracy"] for row in trainer.history], trainer


def model_differences(server: Any, trainer: Any) -> dict[str, float]:
    """The largest |fedlight - PFLlib| of each shared module after the last round, and of the
    clients' private heads."""
    shared = trainer.global_state
    ours = {"encoder": [v for k, v in shared.items() if k.startswith("model.encoder.")],
            "CoV": [v for k, v in shared.items() if k.startswith("cov.")],
            "GCE": [shared["gce.weight"]]}
    theirs = {"encoder": list(server.global_model.parameters()),
              "CoV": [*server.CoV.Conditional_gamma.parameters(),
                      *server.CoV.Conditional_beta.parameters()],
              "GCE": list(server.GCE.parameters())}
    gaps = {name: max((a - b.detach()).abs().max().item()
                      for a, b in zip(ours[name], theirs[name], strict=True)) for name in ours}
    heads = [(trainer.client_states[index][key] - param.detach()).abs().max().item()
             for index, pfllib_client in enumerate(server.clients)
             for key, param in zip(("model.head.weight", "model.head.bias"),
                                   pfllib_client.model.head.parameters(), strict=True)]
    gaps["heads"] = max(heads)
    return gaps


def compare(options: argparse.Namespace, folder: Path, scratch: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    clients = int(config["num_clients"])
    train = [len(np.load(folder / "train" / f"{i}.npz", allow_pickle=True)["data"].item()["y"])
             for i in range(clients)]
    setup = {"clients": clients, "classes": int(config["num_classes"]),
             "batch": options.batch or max(train)}
    workdir = scratch / "system"
    workdir.mkdir()
    here = Path.cwd()
    os.chdir(workdir)  # PFLlib writes relative to its working folder
    try:
        server = pfllib_server(options.pfllib / "system", folder, setup, options,
                               setup["batch"])
        theirs = ([float("nan")] * options.rounds if options.fedlight_only
                  else pfllib_rounds(server, options.rounds))
    finally:
        os.chdir(here)
    ours, trainer = fedlight_run(server, folder, setup, options, scratch / "runs")
    inputs = {"received": "from the table received (the one change)",
              "authors": "from its own table of the round before (as it is)"}
    print(f"GPFL on {folder.name}: {clients} clients, {setup['classes']} classes, "
          f"{min(train)}-{max(train)} training images a client, batch {setup['batch']}, "
          f"{options.epochs} local epoch(s), {options.rounds} rounds; PFLlib's conditional "
          f"inputs {inputs[options.pfllib_inputs]}; initial weights drawn after "
          f"torch.manual_seed({options.init_seed})")
    print("round  PFLlib accuracy (%)  fedlight accuracy (%)")
    for index, (a, b) in enumerate(zip(theirs, ours, strict=True)):
        print(f"{index + 1:5d}  {a:19.4f}  {b:21.4f}")
    if not options.fedlight_only:
        gaps = model_differences(server, trainer)
        print("after the last round, largest |fedlight - PFLlib|: "
              + ", ".join(f"{name} {gap:.3e}" for name, gap in gaps.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pfllib", type=Path, help="PFLlib's repository root")
    parser.add_argument("--folder", type=Path, help="a PFLlib dataset folder (default: a "
                        "small random one written here)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, help="default: a client's whole training split")
    parser.add_argument("--epochs", type=int, default=3, help="local epochs")
    parser.add_argument("--init-seed", type=int, default=0, help="torch.manual_seed before "
                        "the initial weights are drawn (PFLlib's main.py: 0)")
    parser.add_argument("--fedlight-only", action="store_true", help="train fedlight alone "
                        "(from PFLlib's initial weights); PFLlib's columns are left empty")
    parser.add_argument("--pfllib-inputs", choices=("received", "authors"), default="received")
    options = parser.parse_args()
    options.pfllib = options.pfllib.resolve()  # before this script changes folder
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")  # PFLlib's softmax without dim, each batch
    with tempfile.TemporaryDirectory() as scratch:
        folder = options.folder.resolve() if options.folder else None
        if folder is None:
            folder = Path(scratch) / "dataset" / "random_clients"
            write_clients(folder, clients=4, classes=100, train=20, test=40)
        compare(options, folder, Path(scratch))


if __name__ == "__main__":
    main()
