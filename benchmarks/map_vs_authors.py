"""MAP, FedRS and FedPHP in the authors' code and in fedlight, from the same initial weights, on
the same clients, with the same batches: do both score the same accuracy each round and end
at the same models?

The authors' code is a checkout of ``lxcnju/MAP`` given on the command line; it is run as it
is, from outside: its own classes (``algorithms/fedap.FedAP`` for MAP, ``algorithms/fedrs.FedRS``,
``algorithms/fedphp.FedPHP``) by their own ``train`` loop, with two subclass hooks and nothing
else changed: each client's training loader yields the batches fedlight draws for that client
and round (``fedlight.data.iterate_batches`` with the generator of ``derive_seed(seed, round,
client)``; a fresh pass where the code starts one), and after each client's local work the
personalized model is scored with the code's own ``test`` (its HPM accuracy is the code's own
``local_test``, which ``train`` computes anyway). Their model is their ``TFCNN`` (what the paper
runs on CIFAR-10), drawn after ``torch.manual_seed(--init-seed)``; fedlight trains the same
network (every conv padded, a max-pool after each, a bias-free head on the 1,024-d map; built
here from ``fedlight.models.conv_stack.conv_backbone``) from those weights, its parameters mapped in
order onto fedlight's names.

fedlight runs each method in the authors' code's form, one switch each
(``docs/authors_code.md``): the sample-weighted mean, ``mu_cap 0.9``, gradients clipped
at norm 100, SGD momentum 0.9 and weight decay 1e-5, ``lr_warmup_rounds 5``; MAP and FedPHP
with ``kd_form code`` and ``hpm_init initial``; MAP with ``rs_mode all`` (the code's
``dist >= min_samples`` with ``min_samples = 1`` scales every logit of a client holding two or
more classes) and ``schedule code``; FedRS as the original (``rs_mode soft``, no
personalization phase); FedPHP as the original (``rs_epochs 0``: every step distills and the
distilled model is the upload).

The clients: ``--data`` (a CIFAR-10 ImageFolder, ``/work/shared/data/cifar10``) gives a real
split written as a PFLlib folder (fedlight's ``pfllib`` source reads it; the authors' classes
get the same arrays): ``--clients`` clients, each holding 2-5 classes drawn with ``--split-seed``
and ``--train`` / ``--test`` images spread over them. ``--self-test`` instead runs random
clients against a small fake of the authors' modules written here (what the test suite runs).

``--authors-aggregation fedlight`` replaces, from outside, the authors' server's sum of the
uploads (``update_global``: float32 products summed in their random client order) by
fedlight's own ``weighted_mean`` (a float64 running sum in client-id order, each upload weighted
by its training samples, one division, cast back to float32): whether that sum is the whole
difference between the two runs. ``--authors-hpm-update fedlight`` (FedPHP) likewise computes
their HPM update in fedlight's in-place arithmetic.

    python benchmarks/map_vs_authors.py /work/authors/MAP --data /work/shared/data/cifar10 \\
        --rounds 20 --json benchmarks/results/same_start/map.json --methods map
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import shlex
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch import nn

from fedlight.core.rules import weighted_mean
from fedlight.core.seeding import derive_seed
from fedlight.data.datamodule import batches_per_epoch, iterate_batches

SEED = 0
METHODS = {"map": ("MAP", "fedap", "FedAP"), "fedrs": ("FedRS", "fedrs", "FedRS"),
           "fedphp": ("FedPHP", "fedphp", "FedPHP")}
AUTHORS_MODULES = ("algorithms", "networks", "utils", "tools")
CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


# ===================================================================== the clients
def write_cifar10_split(folder: Path, data: Path, options: argparse.Namespace) -> str:
    """A PFLlib folder of real CIFAR-10 clients: each 2-5 classes, ``--train`` / ``--test``
    images spread over them (disjoint across clients), normalized. Returns its description."""
    from PIL import Image

    generator = np.random.default_rng(options.split_seed)
    classes = sorted(p.name for p in (data / "train").iterdir())
    files = {split: {c: generator.permutation(sorted((data / split / c).iterdir())).tolist()
                     for c in classes} for split in ("train", "test")}
    mean, std = np.array(CIFAR_MEAN)[:, None, None], np.array(CIFAR_STD)[:, None, None]
    for split in ("train", "test"):
        (folder / split).mkdir(parents=True)
    for client in range(options.clients):
        held = sorted(generator.choice(len(classes), generator.integers(2, 6), replace=False))
        for split, size in (("train", options.train), ("test", options.test)):
            labels = [held[i % len(held)] for i in range(size)]
            paths = [files[split][classes[c]].pop() for c in labels]
            x = np.stack([(np.asarray(Image.open(p).convert("RGB"), dtype=np.float64)
                           .transpose(2, 0, 1) / 255 - mean) / std for p in paths])
            np.savez_compressed(folder / split / f"{client}.npz",
                                data={"x": x.astype(np.float32), "y": np.array(labels)})
    (folder / "config.json").write_text(json.dumps({"num_clients": options.clients,
                                                    "num_classes": len(classes)}))
    return (f"CIFAR-10 ({data}), {options.clients} clients of 2-5 classes drawn with seed "
            f"{options.split_seed}, {options.train} training and {options.test} test images each")


def write_random_clients(folder: Path, options: argparse.Namespace) -> str:
    """A PFLlib folder of random 3x32x32 images, each client 2 of 10 classes."""
    generator = np.random.default_rng(1)
    for split in ("train", "test"):
        (folder / split).mkdir(parents=True)
    for client in range(options.clients):
        held = generator.choice(10, 2, replace=False)
        for split, size in (("train", options.train), ("test", options.test)):
            x = generator.standard_normal((size, 3, 32, 32)).astype(np.float32)
            y = np.array([held[i % 2] for i in range(size)])
            np.savez_compressed(folder / split / f"{client}.npz", data={"x": x, "y": y})
    (folder / "config.json").write_text(json.dumps({"num_clients": options.clients,
                                                    "num_classes": 10}))
    return f"random images, {options.clients} clients of 2 classes, {options.train} training each"


def read_clients(folder: Path) -> list[tuple[np.ndarray, ...]]:
    """Each client's ``(x_train, y_train, x_test, y_test)`` as the PFLlib folder holds them."""
    clients = json.loads((folder / "config.json").read_text())["num_clients"]
    return [tuple(array for split in ("train", "test")
                  for array in _npz(folder / split / f"{i}.npz")) for i in range(clients)]


def _npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    record = np.load(path, allow_pickle=True)["data"].tolist()
    return record["x"], record["y"].astype(np.int64)


# ===================================================================== the authors' side
class ArrayDataset(torch.utils.data.Dataset):
    """The ``xs`` / ``ys`` dataset the authors' classes read (``csets[client][0].ys``)."""

    def __init__(self, xs: np.ndarray, ys: np.ndarray) -> None:
        self.xs, self.ys = xs, ys

    def __len__(self) -> int:
        return len(self.ys)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.from_numpy(self.xs[index]), torch.tensor(self.ys[index])


class FedlightBatchOrder:
    """A training loader yielding, pass after pass, the batches fedlight draws for the client
    in the round set by :meth:`start`."""

    def __init__(self, xs: np.ndarray, ys: np.ndarray, batch_size: int, client: int) -> None:
        self.x, self.y = torch.from_numpy(xs), torch.from_numpy(ys)
        self.batch_size, self.client = batch_size, client
        self.generator = torch.Generator()

    def start(self, round_idx: int) -> None:
        self.generator.manual_seed(derive_seed(SEED, round_idx, self.client))

    def __len__(self) -> int:
        return batches_per_epoch(len(self.y), self.batch_size)

    def __iter__(self) -> Any:
        return iterate_batches(self.x, self.y, self.batch_size, self.generator)


def authors_algorithm(authors: Path, method: str, clients: list[tuple[np.ndarray, ...]],
                      options: argparse.Namespace) -> Any:
    """The authors' server object for ``method`` on ``clients``, its loaders in fedlight's
    batch order, recording each participant's accuracies per round in ``records``."""
    for name in [n for n in sys.modules if n.split(".")[0] in AUTHORS_MODULES]:
        del sys.modules[name]  # another checkout's (a self-test's fake) imported before
    sys.path.insert(0, str(authors))
    module = __import__(f"algorithms.{METHODS[method][1]}", fromlist=["_"])
    from networks.basic_classify_nets import get_basic_net

    base = getattr(module, METHODS[method][2])
    samples = {i: float(len(c[1])) for i, c in enumerate(clients)}

    class Driven(base):  # type: ignore[misc, valid-type]
        """The authors' class, its loaders started each round, its clients scored."""

        def update_local(self, **kwargs: Any) -> Any:
            kwargs["train_loader"].start(kwargs["r"] - 1)
            result = super().update_local(**kwargs)
            if method == "fedrs":
                self.score(kwargs["r"], result[0], kwargs["test_loader"], None)
            elif method == "fedphp":
                self.score(kwargs["r"], result[0], kwargs["test_loader"], result[2][-1])
            return result

        def update_local_hpm(self, **kwargs: Any) -> Any:
            result = super().update_local_hpm(**kwargs)
            self.score(kwargs["r"], kwargs["model"], kwargs["test_loader"], result[1][-1])
            return result

        def update_global(self, r: int, global_model: nn.Module, local_models: dict[Any, Any],
                          weights: dict[Any, float]) -> None:
            if options.authors_aggregation == "authors":
                super().update_global(r, global_model, local_models, weights)
                return
            # fedlight's own mean: float64 running sum in client-id order, each upload
            # weighted by its training samples, one division, cast back to float32
            order = sorted(local_models)
            mean = weighted_mean([local_models[c].state_dict() for c in order],
                                 [samples[c] for c in order])
            global_model.load_state_dict(mean, strict=False)

        def update_hpm(self, client: int, model: nn.Module, hpm: nn.Module, *rest: Any) -> Any:
            if options.authors_hpm_update == "authors" or method != "fedphp":
                return super().update_hpm(client, model, hpm, *rest)
            # fedlight's arithmetic (MAP.on_round_end): in place, mu * hpm, then one fused
            # add of (1 - mu) * model (the code rounds both products, then their sum)
            mu = self.generate_mu(client)
            with torch.no_grad():
                new = model.state_dict()
                for name, value in hpm.state_dict().items():
                    value.mul_(mu).add_(new[name], alpha=1.0 - mu)
            return hpm

        def score(self, r: int, model: nn.Module, loader: Any, hpm: float | None) -> None:
            row = {"personalized": 100 * self.test(model, loader)[0]}
            if hpm is not None:
                row["hpm"] = 100 * hpm
            self.records[r].append(row)

    csets = {i: (ArrayDataset(c[0], c[1]), ArrayDataset(c[2], c[3]))
             for i, c in enumerate(clients)}
    gset = ArrayDataset(np.concatenate([c[2] for c in clients]),
                        np.concatenate([c[3] for c in clients]))
    args = SimpleNamespace(
        c_ratio=1.0, max_round=options.rounds, test_round=options.rounds + 1, local_steps=None,
        local_epochs=options.epochs, batch_size=options.batch, optimizer="SGD", lr=options.lr,
        momentum=0.9, weight_decay=1e-5, max_grad_norm=100.0, cuda=False, min_samples=1,
        n_classes=10, alpha=options.alpha, reg_way="KD", reg_lamb=options.lamda)
    torch.manual_seed(options.init_seed)
    model = get_basic_net(net="TFCNN", n_classes=10, input_size=32, input_channel=3,
                          bias=False)
    with contextlib.redirect_stdout(io.StringIO()):  # "Train FedAP!"
        algorithm = Driven(csets=csets, gset=gset, model=model, args=args)
    for i, c in enumerate(clients):
        algorithm.train_loaders[i] = FedlightBatchOrder(c[0], c[1], options.batch, i)
    algorithm.records = defaultdict(list)  # round -> each participant's accuracies
    algorithm.initial = copy.deepcopy(model)
    return algorithm


def authors_rounds(algorithm: Any, order_seed: int = SEED) -> list[dict[str, float]]:
    """The authors' own ``train``; per round the mean over participants of each accuracy.
    ``order_seed`` seeds numpy before it, which draws their clients' order each round (every
    client joins: the order changes only the order in which the uploads are summed)."""
    np.random.seed(order_seed)
    with contextlib.redirect_stdout(io.StringIO()):
        algorithm.train()
    return [{name: float(np.mean([row[name] for row in rows])) for name in rows[0]}
            for _, rows in sorted(algorithm.records.items())]


# ===================================================================== fedlight's side
def fedlight_client(method: str, options: argparse.Namespace) -> Any:
    """fedlight's MAP / FedRS / FedPHP in the authors' code's form, on their TFCNN."""
    from fedlight.clients import MAP, FedPHP, FedRS
    from fedlight.models.conv_stack import POOL, Conv, conv_backbone

    common = {"num_classes": 10, "input_shape": (3, 32, 32), "lr": options.lr, "momentum": 0.9,
              "weight_decay": 1e-5, "rs_alpha": options.alpha, "mu_cap": 0.9,
              "lr_warmup_rounds": 5}
    distill = {"lamda": options.lamda, "kd_form": "code", "hpm_init": "initial"}
    forms: dict[str, tuple[type, dict[str, Any]]] = {
        "map": (MAP, {**distill, "rs_mode": "all", "schedule": "code"}),
        "fedrs": (FedRS, {"rs_mode": "soft", "personalize_epochs": 0}),
        "fedphp": (FedPHP, {**distill, "rs_epochs": 0, "personalize_epochs": options.epochs,
                            "personalize_lr_scale": 1.0}),
    }
    cls, form = forms[method]

    class OnTheirTFCNN(cls):  # type: ignore[misc, valid-type]
        def build_model(self) -> nn.Module:
            spec = (Conv(32, 3, 1), POOL, Conv(64, 3, 1), POOL, Conv(64, 3, 1), POOL)
            backbone = conv_backbone("tfcnn", self.input_shape, self.num_classes, spec, ())
            backbone.head = nn.Linear(backbone.feature_dim, self.num_classes, bias=False)
            return backbone

    return OnTheirTFCNN(**common, **form)


def fedlight_rounds(method: str, initial: nn.Module, folder: Path, options: argparse.Namespace,
                    root: Path) -> tuple[list[dict[str, float]], Any]:
    """fedlight's run from the authors' initial weights: per round the mean over participants
    of the personalized (and HPM) accuracy, and the trainer."""
    from fedlight.data import FederatedDataModule
    from fedlight.data.sources.pfllib import PFLlib
    from fedlight.federation.trainer import FederatedTrainer

    client = fedlight_client(method, options)
    with torch.no_grad():  # the same layers in the same order under other names
        for mine, theirs in zip(client.model.parameters(), initial.parameters(), strict=True):
            mine.copy_(theirs)
        if client.hpm is not None:  # hpm_init: initial
            client.hpm.load_state_dict(client.model.state_dict())
    data = FederatedDataModule(source=PFLlib(root=str(folder)), num_clients=options.clients)
    trainer = FederatedTrainer(rounds=options.rounds, local_epochs=options.epochs,
                               batch_size=options.batch, accelerator="cpu", devices=1,
                               default_root_dir=str(root), progress_bar=False, logger="csv",
                               checkpoint_every=1000, seed=SEED, reinitialize=False,
                               weighting="samples", gradient_clip_val=100.0,
                               memory_format="contiguous")
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.fit(client, data)
    names = ("personalized", "hpm") if client.hpm is not None else ("personalized",)
    return [{name: 100 * row[f"{name}_accuracy_mean"] for name in names}
            for row in trainer.history], trainer


def model_differences(algorithm: Any, trainer: Any) -> dict[str, float]:
    """The largest |fedlight - authors| of the global model and of the clients' HPMs."""
    def gap(ours: list[torch.Tensor], theirs: nn.Module) -> float:
        return max((a - b.detach()).abs().max().item()
                   for a, b in zip(ours, theirs.parameters(), strict=True))

    shared = trainer.global_state
    gaps = {"global model": gap([v for k, v in shared.items() if k.startswith("model.")],
                                algorithm.model)}
    if hasattr(algorithm, "hpms"):
        gaps["HPMs"] = max(gap([v for k, v in trainer.client_states[i].items()
                                if k.startswith("hpm.")], hpm)
                           for i, hpm in algorithm.hpms.items())
    return gaps


# ===================================================================== the comparison
def compare(method: str, authors: Path, folder: Path, split: str, options: argparse.Namespace,
            scratch: Path) -> dict[str, Any]:
    clients = read_clients(folder)
    algorithm = authors_algorithm(authors, method, clients, options)
    theirs = authors_rounds(algorithm)
    ours, trainer = fedlight_rounds(method, algorithm.initial, folder, options, scratch / method)
    per_round = []
    for index, (a, b) in enumerate(zip(theirs, ours, strict=True)):
        row: dict[str, Any] = {"round": index + 1, "fedlight": b["personalized"],
                               "authors": a["personalized"]}
        if "hpm" in a:
            row.update(fedlight_hpm=b["hpm"], authors_hpm=a["hpm"])
        per_round.append(row)
    return {"method": METHODS[method][0], "authors_repo": "lxcnju/MAP",
            "authors_commit": authors_commit(authors),
            "split": f"{split}; batch {options.batch}, {options.epochs} local epochs "
                     f"({options.epochs * len(algorithm.train_loaders[0])} steps), lr "
                     f"{options.lr}, alpha {options.alpha}, lambda {options.lamda}, initial "
                     f"draw torch.manual_seed({options.init_seed})",
            "rounds": options.rounds, "per_round": per_round,
            "max_param_diff": model_differences(algorithm, trainer),
            "authors_aggregation": options.authors_aggregation,
            "authors_hpm_update": options.authors_hpm_update,
            "command": "python " + shlex.join(sys.argv)}


def against_itself(method: str, authors: Path, folder: Path, split: str,
                   options: argparse.Namespace) -> dict[str, Any]:
    """The authors' code twice, the second time with its clients in another order
    (``--against-itself N``: numpy seed ``N``): how far float rounding alone carries a run."""
    clients = read_clients(folder)
    runs = [authors_rounds(authors_algorithm(authors, method, clients, options), seed)
            for seed in (SEED, options.against_itself)]
    return {"method": METHODS[method][0], "authors_repo": "lxcnju/MAP",
            "authors_commit": authors_commit(authors), "split": split,
            "rounds": options.rounds, "order_seeds": [SEED, options.against_itself],
            "per_round": [{"round": i + 1, "authors": a["personalized"],
                           "authors_reordered": b["personalized"]}
                          for i, (a, b) in enumerate(zip(*runs, strict=True))],
            "command": "python " + shlex.join(sys.argv)}


def authors_commit(authors: Path) -> str:
    result = subprocess.run(["git", "-C", str(authors), "rev-parse", "HEAD"],
                            capture_output=True, text=True, check=False)
    return result.stdout.strip() if result.returncode == 0 else "unknown"


def print_result(result: dict[str, Any]) -> None:
    print(f"{result['method']} on {result['split']}")
    hpm = "fedlight_hpm" in result["per_round"][0]
    print("round  authors (%)  fedlight (%)" + ("  authors HPM (%)  fedlight HPM (%)" if hpm
                                                else ""))
    for row in result["per_round"]:
        line = f"{row['round']:5d}  {row['authors']:11.4f}  {row['fedlight']:12.4f}"
        if hpm:
            line += f"  {row['authors_hpm']:15.4f}  {row['fedlight_hpm']:16.4f}"
        print(line)
    print("after the last round, largest |fedlight - authors|: "
          + ", ".join(f"{k} {v:.3e}" for k, v in result["max_param_diff"].items()))


FAKE_AUTHORS = '''
import copy
import numpy as np
import torch
from torch import nn


class Fake:
    """A stand-in with the interface of the authors' classes: plain SGD, weighted mean."""

    def __init__(self, csets, gset, model, args):
        self.model, self.args, self.clients = model, args, list(csets)
        self.train_loaders = {c: None for c in csets}
        self.test_loaders = {c: torch.utils.data.DataLoader(csets[c][1], batch_size=1000)
                             for c in csets}
        if self.with_hpm:
            self.hpms = {c: copy.deepcopy(model) for c in csets}

    def train(self):
        for r in range(1, self.args.max_round + 1):
            uploads = {}
            for c in np.random.permutation(self.clients):
                kw = dict(r=r, model=copy.deepcopy(self.model), train_loader=self.train_loaders[c],
                          test_loader=self.test_loaders[c])
                uploads[c] = self.local(c, kw)
            weights = {c: 1 / len(uploads) for c in uploads}
            self.update_global(r, self.model, uploads, weights)

    def update_global(self, r, global_model, local_models, weights):
        state = {k: sum(weights[c] * m.state_dict()[k] for c, m in local_models.items())
                 for k in global_model.state_dict()}
        global_model.load_state_dict(state)

    def sgd(self, model, loader, r):
        optimizer = torch.optim.SGD(model.parameters(), lr=self.args.lr * min(r / 5, 1))
        for _ in range(self.args.local_epochs):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x)[1], y).backward()
                optimizer.step()
        return model

    def test(self, model, loader):
        x, y = next(iter(loader))
        return (model(x)[1].argmax(1) == y).float().mean().item(), 0.0
'''
FAKE_CLASSES = {
    "fedrs": "class FedRS(Fake):\n    with_hpm = False\n    def local(self, c, kw):\n"
             "        return self.update_local(dist=None, **kw)[0]\n"
             "    def update_local(self, r, model, train_loader, test_loader, dist):\n"
             "        return self.sgd(model, train_loader, r), [0, 0], [0, 0], 0.0\n",
    "fedap": "class FedAP(Fake):\n    with_hpm = True\n    def local(self, c, kw):\n"
             "        model = self.update_local(client=c, dist=None, **kw)[0]\n"
             "        kw['model'] = copy.deepcopy(model)\n"
             "        self.hpms[c] = self.update_local_hpm(client=c, hpm=self.hpms[c], **kw)[0]\n"
             "        return model\n"
             "    def update_local(self, r, client, model, train_loader, test_loader, dist):\n"
             "        return self.sgd(model, train_loader, r), 0.0\n"
             "    def update_local_hpm(self, r, client, model, hpm, train_loader, test_loader):\n"
             "        hpm.load_state_dict(self.sgd(model, train_loader, r).state_dict())\n"
             "        return hpm, [0, self.test(hpm, test_loader)[0]], [0, 0]\n",
    "fedphp": "class FedPHP(Fake):\n    with_hpm = True\n    def local(self, c, kw):\n"
              "        out = self.update_local(client=c, hpm=self.hpms[c], **kw)\n"
              "        model, self.hpms[c] = out[:2]\n"
              "        return model\n"
              "    def update_local(self, r, client, model, hpm, train_loader, test_loader):\n"
              "        model = self.sgd(model, train_loader, r)\n"
              "        hpm.load_state_dict(model.state_dict())\n"
              "        return model, hpm, [0, self.test(hpm, test_loader)[0]], [0, 0], 0.0\n",
}
FAKE_NETWORK = '''
from torch import nn
from fedlight.data.sources.pfllib import PFLlib


class TFCNN(nn.Module):
    def __init__(self, n_classes):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
        self.classifier = nn.Linear(1024, n_classes, bias=False)

    def forward(self, x):
        code = self.encoder(x)
        return code, self.classifier(code)


def get_basic_net(net, n_classes, input_size=None, input_channel=None, bias=False):
    return TFCNN(n_classes)
'''


def write_fake_authors(folder: Path) -> None:
    """A stand-in for a checkout of the authors' code, with the modules, classes and
    methods this script drives (plain SGD; not the authors' methods)."""
    for package in ("algorithms", "networks"):
        (folder / package).mkdir(parents=True)
        (folder / package / "__init__.py").write_text("")
    (folder / "algorithms" / "fake.py").write_text(FAKE_AUTHORS)
    for name, body in FAKE_CLASSES.items():
        (folder / "algorithms" / f"{name}.py").write_text(
            "import copy\nfrom algorithms.fake import Fake\n\n\n" + body)
    (folder / "networks" / "basic_classify_nets.py").write_text(FAKE_NETWORK)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("authors", type=Path, nargs="?", help="a checkout of lxcnju/MAP")
    parser.add_argument("--self-test", action="store_true", help="random clients against a "
                        "fake of the authors' modules written here (no checkout needed)")
    parser.add_argument("--data", type=Path, help="a CIFAR-10 ImageFolder (default: random "
                        "images)")
    parser.add_argument("--methods", nargs="+", choices=sorted(METHODS), default=sorted(METHODS))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--train", type=int, default=160, help="training images a client")
    parser.add_argument("--test", type=int, default=100, help="test images a client")
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=3, help="local epochs")
    parser.add_argument("--lr", type=float, default=0.03)
    parser.add_argument("--alpha", type=float, default=0.5, help="the restricted softmax's a")
    parser.add_argument("--lamda", type=float, default=0.1, help="the weight of the KD term")
    parser.add_argument("--init-seed", type=int, default=0)
    parser.add_argument("--against-itself", type=int, metavar="N", help="run the authors' "
                        "code twice instead, its clients' order drawn with numpy seed 0, then N")
    parser.add_argument("--authors-aggregation", choices=("authors", "fedlight"),
                        default="authors", help="the authors' server sums the uploads as "
                        "their code does (float32, in their random client order), or as "
                        "fedlight does (fedlight's weighted_mean: float64, client-id order, "
                        "sample weights)")
    parser.add_argument("--authors-hpm-update", choices=("authors", "fedlight"),
                        default="authors", help="FedPHP: the authors' HPM update as their code "
                        "computes it (mu * hpm + (1 - mu) * model, each product rounded), or in "
                        "fedlight's in-place arithmetic (hpm.mul_(mu).add_(model, alpha=1 - mu))")
    parser.add_argument("--json", type=Path, help="write the result here (one method), or "
                        "into this folder as <method>.json (several)")
    options = parser.parse_args(argv)
    if options.authors is None and not options.self_test:
        parser.error("give the authors' checkout, or --self-test")
    return options


def main(argv: list[str] | None = None) -> None:
    options = parse(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        authors = options.authors.resolve() if options.authors else scratch / "fake_authors"
        if options.self_test:
            write_fake_authors(authors)
        folder = scratch / "clients"
        split = (write_cifar10_split(folder, options.data.resolve(), options) if options.data
                 else write_random_clients(folder, options))
        for method in options.methods:
            if options.against_itself is not None:
                result = against_itself(method, authors, folder, split, options)
                print(json.dumps(result["per_round"]))
            else:
                result = compare(method, authors, folder, split, options, scratch)
                print_result(result)
            if options.json is not None:
                path = (options.json / f"{method}.json" if len(options.methods) > 1
                        else options.json)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
