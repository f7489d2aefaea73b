"""Where to privatize in the authors' code and in fedlight, from the same initial weights, on
the same clients, with the same batches: do both score the same accuracy each round, end at the
same models and (AutoCS / AutoSA / AutoHS) learn the same choice per block?

The authors' code is a checkout of lxcnju/FedPS-AggregateOrNot given on the command line
(``fedps.py``: ``FedPS`` for the block strings, ``fedps_auto.py``: ``FedPSAuto`` for the
learned ways, ``ps_nets.py`` for the models); it is run from outside, its files unchanged: its
own server class trains its own models (``get_ps_net`` / ``AutoPSNet`` on its ``TFCNN``, built
first, after ``torch.manual_seed(--init-seed)``), one round per call of its ``train`` loop
(``max_round = 1``), and its personalized accuracy is what that loop logs (the mean over
clients of each client's local test accuracy right after its local training). Three things are
given to it from outside: its clients' training loaders draw each epoch's batches in the order
fedlight draws them for that client and round (``fedlight.data.iterate_batches`` with the
generator of ``derive_seed(seed, round, client)``); the test loaders hold each client's test
split (and the global test loader the union of them) as one batch; and ``AutoPSNet``'s Gumbel
draws (``F.gumbel_softmax``) take their noise from the stream fedlight's AutoHS draws from for
that client and round (``fedlight.core.noise``), the evaluation before local training from a
stream of its own. Their mean of the clients' shared tensors sums in float64 (``torch.stack``
made float64 in their modules), rounded once as fedlight's is, unless ``--authors-mean
float32``: a last-bit difference grows within a few rounds at this learning rate
(docs/authors_code.md).

fedlight runs ``FederatedTrainer`` on the same folder (the ``pfllib`` source) with
``Privatize`` / ``AutoCS`` / ``AutoSA`` / ``AutoHS`` on the same network (the authors' TFCNN:
three padded 3x3 convolutions of 32-64-64 each followed by a 2x2 max-pool, 1024 features;
classifier Linear 1024-128, ReLU, Linear 128-U, registered here as the backbone
``tfcnn_padded`` from fedlight's own conv-stack builder), its weights copied from the authors'
model, and the authors' hyperparameters (SGD lr 0.03, momentum 0.9, weight decay 1e-5, gradient
norm clipped at 100, batch 64 or ``--batch``, 2 local epochs, all clients every round, uniform
mean). fedlight takes the switches that reproduce the authors' code where it departs from the
paper (docs/authors_code.md, "Where to privatize: the authors' code's form"): ``combine="product"``
for two outputs, and for the learned ways ``temperature=1``, ``fuse_outputs="authors"``,
``shared_path_step=True`` and (AutoHS) ``sample_at_evaluation=True``; ``--paper-form`` runs
fedlight's defaults instead (the comparison then measures what the switches change).

The clients: ``--folder``, a PFLlib-layout folder (``train/<i>.npz``, ``test/<i>.npz``,
``config.json``); ``--data-root DIR``, a CIFAR-10 folder in ImageFolder layout, split here
(``--clients`` clients, ``pathological`` with ``--classes-per-client`` classes, at most
``--max-client-samples`` images a client, 80 / 20 train / test, ``--split-seed``) and exported
with ``fedlight.data.sources.pfllib.export_pfllib``; by default a small folder of random images
written here (the self-test). With ``--out DIR`` each comparison is written to
``DIR/<method>.json``.

    python benchmarks/privatize_vs_authors.py ../authors/FedPS-AggregateOrNot \\
        --data-root ../shared/data/cifar10 --max-client-samples 125 --batch 32 --rounds 20 \\
        --methods AaBb ABb ab autocs autosa autohs --out benchmarks/results/same_start
    python benchmarks/privatize_vs_authors.py --self-test --rounds 2
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shlex
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import TensorDataset

from fedlight.core.noise import NoiseSource
from fedlight.core.seeding import derive_seed
from fedlight.data.datamodule import batches_per_epoch, iterate_batches
from fedlight.models import BACKBONES
from fedlight.models.conv_stack import POOL, Conv, conv_backbone

SEED, LR, MOMENTUM, WEIGHT_DECAY, CLIP, EPOCHS = 0, 0.03, 0.9, 1e-5, 100.0, 2
BACKBONE = "tfcnn_padded"
#: the authors' TFCNN (basic_nets.py): padded 3x3 convs, a pool after each, FC 128 in the head
AUTHORS_TFCNN = (Conv(32, 3, 1), POOL, Conv(64, 3, 1), POOL, Conv(64, 3, 1), POOL)
#: block string -> the authors' (ps_type, split_layer) of ps_nets.get_ps_net
BLOCK_STRINGS = {"AB": ("PSNet", 0), "aB": ("PSNet", 1), "ab": ("SPNet", 0),
                 "Ab": ("SPNet", 1), "AaB": ("PS2Net", 1), "AaBb": ("SP2Net", 0),
                 "ABb": ("SP2Net", 1)}
#: learned way -> the authors' AutoPSNet way
AUTO_WAYS = {"autocs": "cs", "autosa": "attn", "autohs": "gs"}
BLOCKS = ("A", "B")
#: what the record's method name says of the authors' mean (and its file name)
MEAN_LABELS = {"float64": "", "float32": " (authors' float32 mean)"}
#: the authors' modules this script imports (and the stand-in writes)
AUTHORS_MODULES = ("utils", "ps_nets", "fedps", "fedps_auto")
#: written beside an exported split: what it is (read back when it is given as --folder)
SPLIT_FILE = "fedlight_split.json"


def tfcnn_padded(input_shape: Sequence[int], num_classes: int) -> Any:
    """The authors' TFCNN cut as their coarse split: encoder = the convolutions (1024
    features at 32x32), head = Linear 1024-128, ReLU, Linear 128-U."""
    return conv_backbone(BACKBONE, input_shape, num_classes, AUTHORS_TFCNN, fc_dims=(128,),
                         all_fc_head=True)


def register_backbone() -> None:
    """Make ``tfcnn_padded`` a backbone name for this process (fedlight's zoo is a dict)."""
    BACKBONES.setdefault(BACKBONE, tfcnn_padded)


# ===================================================================== the self-test's stand-in
# Written here, not the authors' code: modules with the names, classes and attributes this
# script drives, training the protocol the paper describes (two whole models "AaBb", one
# private model "ab", the learned ways with a second step on the shared path).
STAND_IN_METHODS = ("AaBb", "ab", *AUTO_WAYS)

STAND_IN_UTILS = '''
from torch import nn


def weights_init(module):
    if isinstance(module, (nn.Conv2d, nn.Linear)):
        nn.init.normal_(module.weight, 0.0, 0.05)
        nn.init.zeros_(module.bias)
'''

STAND_IN_PS_NETS = '''
import torch
import torch.nn.functional as F
from torch import nn

from utils import weights_init


def two_blocks(n_classes):
    convs = []
    for inputs, outputs in ((3, 32), (32, 64), (64, 64)):
        convs += [nn.Conv2d(inputs, outputs, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
    return [nn.Sequential(*convs, nn.Flatten()),
            nn.Sequential(nn.Linear(1024, 128), nn.ReLU(), nn.Linear(128, n_classes))]


class TwoBranches(nn.Module):
    """SP2Net with split 0 (two whole models) or SPNet with split 0 (one private model)."""

    def __init__(self, ps_type, n_classes):
        super().__init__()
        self.ps_type = ps_type
        first = two_blocks(n_classes)
        if ps_type == "SP2Net":
            self.shared_layers = nn.ModuleList(first)
            self.private_layers = nn.ModuleList(two_blocks(n_classes))
        else:
            self.shared_layers = nn.ModuleList()
            self.private_layers = nn.ModuleList(first)

    def forward(self, x):
        private = self.private_layers[1](self.private_layers[0](x))
        if self.ps_type == "SPNet":
            return private
        return self.shared_layers[1](self.shared_layers[0](x)), private

    def global_forward(self, x):
        if self.ps_type == "SPNet":
            return None
        return self.shared_layers[1](self.shared_layers[0](x))


def get_ps_net(ps_type, net, split_layer, n_classes):
    assert ps_type in ("SP2Net", "SPNet") and split_layer == 0
    model = TwoBranches(ps_type, n_classes)
    model.apply(weights_init)
    return model


class AutoPSNet(nn.Module):
    def __init__(self, net, way, n_classes):
        super().__init__()
        self.way = way
        self.shared_layers = nn.ModuleList(two_blocks(n_classes))
        self.private_layers = nn.ModuleList(two_blocks(n_classes))
        rows = 2 if way == "cs" else 1
        self.shared_coefs = nn.ParameterList(
            [nn.Parameter(torch.full((rows, 2), 0.5)) for _ in range(2)])

    def forward(self, x):
        shared = private = x
        for block in range(2):
            shared = self.shared_layers[block](shared)
            private = self.private_layers[block](private)
            coefs = self.shared_coefs[block]
            if self.way == "gs":
                weights = F.gumbel_softmax(coefs, tau=1.0, hard=True)
            else:
                weights = coefs.softmax(-1)
            mixed = [w[0] * shared + w[1] * private for w in weights]
            shared, private = mixed[0], mixed[-1]
        return shared, private

    def global_forward(self, x):
        return self.shared_layers[1](self.shared_layers[0](x))
'''

STAND_IN_FEDPS = '''
import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader


class FedPS:
    def __init__(self, csets, gset, model, args):
        self.model, self.args = model, args
        self.clients = list(csets)
        self.private_models = {c: copy.deepcopy(model.private_layers) for c in self.clients}
        self.train_loaders = {c: DataLoader(csets[c][0], args.batch_size, shuffle=True)
                              for c in self.clients}
        self.test_loaders = {c: DataLoader(csets[c][1], args.batch_size) for c in self.clients}
        self.glo_test_loader = DataLoader(gset, args.batch_size)
        self.logs = {"LOCAL_TACCS": [], "GLO_TACCS": []}

    def train(self):
        for r in range(1, self.args.max_round + 1):
            trained, accuracies = {}, []
            for client in np.random.permutation(self.clients):
                local = copy.deepcopy(self.model)
                local.private_layers.load_state_dict(self.private_models[client].state_dict())
                local, client_accuracies, _ = self.update_local(
                    r, local, self.train_loaders[client], self.test_loaders[client])
                self.private_models[client].load_state_dict(local.private_layers.state_dict())
                trained[client] = local
                accuracies.append(client_accuracies)
            mean = {name: torch.stack([m.state_dict()[name] for m in trained.values()]).mean(0)
                    for name in self.model.state_dict() if not name.startswith("private")}
            self.model.load_state_dict(mean, strict=False)
            self.logs["LOCAL_TACCS"].extend(np.mean(accuracies, axis=0).tolist())
            self.logs["GLO_TACCS"].append(self.global_test())

    def loss(self, model, x, y):
        outputs = model(x)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        return sum(F.cross_entropy(o, y) for o in outputs)

    def step(self, model, optimizer, loss):
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), self.args.max_grad_norm)
        optimizer.step()

    def local_step(self, model, optimizer, x, y):
        self.step(model, optimizer, self.loss(model, x, y))

    def update_local(self, r, model, train_loader, test_loader):
        optimizer = torch.optim.SGD(model.parameters(), lr=self.args.lr,
                                    momentum=self.args.momentum,
                                    weight_decay=self.args.weight_decay)
        before = self.local_test(model, test_loader)
        model.train()
        batches = iter(train_loader)
        for _ in range(self.args.local_epochs * len(train_loader)):
            try:
                x, y = next(batches)
            except StopIteration:
                batches = iter(train_loader)
                x, y = next(batches)
            self.local_step(model, optimizer, x, y)
        return model, [before, self.local_test(model, test_loader)], 0.0

    def combine(self, first, second):
        return F.softmax(first, 1) * F.softmax(second, 1)

    def local_test(self, model, loader):
        model.eval()
        accuracies = []
        with torch.no_grad():
            for x, y in loader:
                outputs = model(x)
                probs = (self.combine(*outputs) if isinstance(outputs, tuple)
                         else F.softmax(outputs, 1))
                accuracies.append((probs.argmax(1) == y).float().mean().item())
        return float(np.mean(accuracies))

    def global_test(self):
        correct = total = 0
        with torch.no_grad():
            for x, y in self.glo_test_loader:
                logits = self.model.global_forward(x)
                if logits is None:
                    return 0.0
                correct += int((logits.argmax(1) == y).sum())
                total += len(y)
        return correct / total
'''

STAND_IN_FEDPS_AUTO = '''
import torch.nn.functional as F

from fedps import FedPS
from fedlight.data import SampleCaps
from fedlight.data.partitions.pathological import Pathological
from fedlight.data.sources.imagefolder import ImageFolder
from fedlight.data.sources.pfllib import PFLlib


class FedPSAuto(FedPS):
    def local_step(self, model, optimizer, x, y):
        self.step(model, optimizer, self.loss(model, x, y))
        self.step(model, optimizer, F.cross_entropy(model.global_forward(x), y))

    def combine(self, first, second):
        return (F.softmax(first, 1) + F.softmax(second, 1)) / 2
'''


def write_stand_in(folder: Path) -> None:
    """The stand-in checkout of ``--self-test`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in zip(AUTHORS_MODULES, (STAND_IN_UTILS, STAND_IN_PS_NETS, STAND_IN_FEDPS,
                                            STAND_IN_FEDPS_AUTO), strict=True):
        (folder / f"{name}.py").write_text(text.lstrip())


# ===================================================================== the clients
def write_random_clients(folder: Path, clients: int, train: int, test: int) -> None:
    """A PFLlib-layout folder of random 3x32x32 images, each client holding 2 of 10 classes."""
    generator = np.random.default_rng(1)
    for split in ("train", "test"):
        (folder / split).mkdir(parents=True)
    for client in range(clients):
        present = generator.choice(10, 2, replace=False)
        for split, size in (("train", train), ("test", test)):
            x = generator.standard_normal((size, 3, 32, 32)).astype(np.float32)
            y = generator.choice(present, size).astype(np.int64)
            np.savez_compressed(folder / split / f"{client}.npz", data={"x": x, "y": y})
    (folder / "config.json").write_text(json.dumps({"num_clients": clients, "num_classes": 10}))


def export_cifar10(options: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Split the CIFAR-10 folder at ``--data-root`` as the options say, export it in PFLlib's
    layout to ``folder``; returns the split's description."""
    from fedlight.data import FederatedDataModule, SampleCaps
    from fedlight.data.partitions.pathological import Pathological
    from fedlight.data.sources.imagefolder import ImageFolder
    from fedlight.data.sources.pfllib import export_pfllib

    split = {"dataset": "cifar10", "source": "imagefolder", "clients": options.clients,
             "partition": "pathological", "classes_per_client": options.classes_per_client,
             "max_client_samples": options.max_client_samples, "train_fraction": 0.8,
             "seed": options.split_seed}
    data = FederatedDataModule(source=ImageFolder(root=str(options.data_root)),
                               partition=Pathological(
                                   classes_per_client=options.classes_per_client),
                               num_clients=options.clients,
                               train_fraction=0.8,
                               seed=options.split_seed,
                               caps=SampleCaps(client_samples=options.max_client_samples))
    export_pfllib(data, folder)
    (folder / SPLIT_FILE).write_text(json.dumps(split) + "\n")
    return split


def read_clients(folder: Path) -> dict[int, tuple[Tensor, Tensor, Tensor, Tensor]]:
    """Each client's ``(x_train, y_train, x_test, y_test)`` of a PFLlib-layout folder."""
    count = json.loads((folder / "config.json").read_text())["num_clients"]
    clients = {}
    for client in range(count):
        parts = []
        for split in ("train", "test"):
            with np.load(folder / split / f"{client}.npz", allow_pickle=True) as archive:
                record = archive["data"].tolist()
            parts += [torch.from_numpy(record["x"].astype(np.float32)),
                      torch.from_numpy(record["y"].astype(np.int64))]
        clients[client] = (parts[0], parts[1], parts[2], parts[3])
    return clients


class FedlightBatchOrder:
    """A training loader for the authors' client: each ``iter`` is the next epoch of the
    batches fedlight draws for this client in the round set by :meth:`start` (its
    ``update_local`` calls ``iter`` at the start and whenever an epoch is exhausted)."""

    def __init__(self, x: Tensor, y: Tensor, client: int, batch: int) -> None:
        self.x, self.y, self.client, self.batch, self.round = x, y, client, batch, 0
        self.generator = torch.Generator()

    def start(self, round_idx: int) -> None:
        self.round = round_idx
        self.generator.manual_seed(derive_seed(SEED, round_idx, self.client))

    def __len__(self) -> int:
        return batches_per_epoch(len(self.y), self.batch)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        return _Epoch(iterate_batches(self.x, self.y, self.batch, self.generator))


class _Epoch:
    """An epoch's batches with the ``.next()`` the authors' code calls (old torch loaders)."""

    def __init__(self, batches: Iterator[tuple[Tensor, Tensor]]) -> None:
        self.batches = batches

    def __iter__(self) -> _Epoch:
        return self

    def __next__(self) -> tuple[Tensor, Tensor]:
        return next(self.batches)

    next = __next__


# ===================================================================== the authors' side
class GumbelFeed:
    """Where the authors' ``F.gumbel_softmax`` takes its noise: fedlight's AutoHS stream of the
    client and round being trained (its key as ``reseed_noise`` derives it), or a stream of its
    own for the evaluation the authors' client runs before local training."""

    def __init__(self) -> None:
        self.main, self.before = NoiseSource(), NoiseSource()
        self.source = self.main

    def start(self, round_idx: int, client: int) -> None:
        seed = derive_seed(SEED, round_idx, client)
        self.main.reseed(derive_seed(seed, 0))
        self.before.reseed(derive_seed(seed, 1))

    def gumbel_softmax(self, logits: Tensor, tau: float = 1.0, hard: bool = False,
                       eps: float = 1e-10, dim: int = -1) -> Tensor:
        """``torch.nn.functional.gumbel_softmax`` with the noise of :attr:`source`."""
        soft = ((logits + self.source.gumbel_like(logits)) / tau).softmax(dim)
        if not hard:
            return soft
        index = soft.argmax(dim, keepdim=True)
        return torch.zeros_like(soft).scatter_(dim, index, 1.0) - soft.detach() + soft


class _Functional(ModuleType):
    """``torch.nn.functional`` with ``gumbel_softmax`` replaced (for ``ps_nets.F``)."""

    def __init__(self, feed: GumbelFeed) -> None:
        super().__init__("functional_with_fedlight_gumbel")
        self.gumbel_softmax = feed.gumbel_softmax

    def __getattr__(self, name: str) -> Any:
        return getattr(F, name)


class _TorchFloat64Stack(ModuleType):
    """``torch`` with ``stack`` giving float64 (for the authors' ``update_global``: their mean
    of the clients' tensors is then rounded once, as fedlight's float64 sum is)."""

    def __init__(self) -> None:
        super().__init__("torch_with_float64_stack")

    def stack(self, tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
        return torch.stack(list(tensors), dim).double()

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


def import_authors(authors: Path) -> SimpleNamespace:
    """The authors' modules, imported from their checkout."""
    for name in AUTHORS_MODULES:
        sys.modules.pop(name, None)  # another checkout's (a self-test's stand-in) imported before
    sys.path.insert(0, str(authors))
    import fedps
    import fedps_auto
    import ps_nets
    import utils

    return SimpleNamespace(fedps=fedps, fedps_auto=fedps_auto, ps_nets=ps_nets, utils=utils)


def authors_model(code: SimpleNamespace, method: str, classes: int, init_seed: int) -> nn.Module:
    """The authors' model for ``method``, built as their train_fedps*.py build it."""
    torch.manual_seed(init_seed)
    if method in BLOCK_STRINGS:
        ps_type, split_layer = BLOCK_STRINGS[method]
        model: nn.Module = code.ps_nets.get_ps_net(ps_type, "TFCNN", split_layer, classes)
        return model
    model = code.ps_nets.AutoPSNet(net="TFCNN", way=AUTO_WAYS[method], n_classes=classes)
    model.apply(code.utils.weights_init)
    return model


def authors_server(code: SimpleNamespace, method: str, model: nn.Module,
                   clients: dict[int, tuple[Tensor, ...]], feed: GumbelFeed, batch: int,
                   mean: str = "float64") -> Any:
    """The authors' FedPS / FedPSAuto on ``clients``, reading fedlight's batch order; with
    ``mean="float64"`` their mean of the shared tensors summed in float64."""
    for module in (code.fedps, code.fedps_auto):
        module.torch = _TorchFloat64Stack() if mean == "float64" else torch
    base = code.fedps.FedPS if method in BLOCK_STRINGS else code.fedps_auto.FedPSAuto

    class Driven(base):  # type: ignore[misc, valid-type]
        """Their server; each client's round keys the Gumbel feed, whose first evaluation
        (before local training) draws from a stream of its own."""

        def update_local(self, r: int, model: nn.Module, train_loader: FedlightBatchOrder,
                         test_loader: Any) -> Any:
            feed.start(train_loader.round, train_loader.client)
            self.evaluations = 0
            return super().update_local(r, model, train_loader, test_loader)

        def local_test(self, model: nn.Module, loader: Any) -> float:
            feed.source = feed.before if self.evaluations == 0 else feed.main
            self.evaluations += 1
            accuracy: float = super().local_test(model, loader)
            feed.source = feed.main
            return accuracy

    code.ps_nets.F = _Functional(feed)
    args = SimpleNamespace(
        cuda=False, c_ratio=1.0, max_round=1, test_round=1, local_steps=None,
        local_epochs=EPOCHS, batch_size=batch, optimizer="SGD", lr=LR, momentum=MOMENTUM,
        weight_decay=WEIGHT_DECAY, max_grad_norm=CLIP)
    csets = {c: (TensorDataset(x, y), TensorDataset(xt, yt)) for c, (x, y, xt, yt)
             in clients.items()}
    gset = TensorDataset(torch.cat([c[2] for c in clients.values()]),
                         torch.cat([c[3] for c in clients.values()]))
    server = Driven(csets, gset, model, args)
    for c, (x, y, xt, yt) in clients.items():
        server.train_loaders[c] = FedlightBatchOrder(x, y, c, batch)
        server.test_loaders[c] = [(xt, yt)]
    # one batch: their global_test averages per-batch accuracies, a batch of another size
    # would weigh its samples differently from fedlight's pooled accuracy
    server.glo_test_loader = [gset.tensors]
    return server


def authors_rounds(server: Any, rounds: int) -> tuple[list[float], list[float]]:
    """``rounds`` calls of their one-round ``train``: the personalized accuracy (%) each round
    logs (after local training) and the global model's (where it has one)."""
    personalized, global_ = [], []
    for round_idx in range(rounds):
        for loader in server.train_loaders.values():
            loader.start(round_idx)
        with contextlib.redirect_stdout(io.StringIO()):  # its one line per round
            server.train()
        personalized.append(100 * float(server.logs["LOCAL_TACCS"][-1]))
        global_.append(100 * float(server.logs["GLO_TACCS"][-1]))
    return personalized, global_


# ===================================================================== fedlight's side
def fedlight_client(method: str, classes: int, paper_form: bool) -> Any:
    """fedlight's client for ``method`` with the authors' hyperparameters; the switches that
    reproduce the authors' code unless ``paper_form``."""
    from fedlight.clients import AutoCS, AutoHS, AutoSA, Privatize

    common = dict(backbone=BACKBONE, num_classes=classes, input_shape=(3, 32, 32), lr=LR,
                  momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    if method in BLOCK_STRINGS:
        return Privatize(way=method, combine="mean" if paper_form else "product", **common)
    auto = {"autocs": AutoCS, "autosa": AutoSA, "autohs": AutoHS}[method]
    if paper_form:
        return auto(**common)
    extra = {"sample_at_evaluation": True} if method == "autohs" else {}
    return auto(temperature=1.0, fuse_outputs="authors", shared_path_step=True, **extra,
                **common)


def module_pairs(method: str, theirs: nn.Module, ours: Any) -> list[tuple[nn.Module, nn.Module]]:
    """(authors' module, fedlight's module) holding the same block copy (or coefficients)."""
    if method not in BLOCK_STRINGS:
        return [(theirs.shared_layers[0], ours.model.encoder),
                (theirs.shared_layers[1], ours.model.head),
                (theirs.private_layers[0], ours.private["a"]),
                (theirs.private_layers[1], ours.private["b"]),
                (_Holder(theirs.shared_coefs[0]), _Holder(ours.alpha)),
                (_Holder(theirs.shared_coefs[1]), _Holder(ours.beta))]
    ps_type, split = BLOCK_STRINGS[method]
    shared_blocks = {"PSNet": range(split, 2), "SPNet": range(split),
                     "PS2Net": range(2), "SP2Net": range(2)}[ps_type]
    private_blocks = {"PSNet": range(split), "SPNet": range(split, 2),
                      "PS2Net": range(split), "SP2Net": range(split, 2)}[ps_type]
    names = ours.block_names
    pairs = [(theirs.shared_layers[i], ours.model.get_submodule(names[b]))
             for i, b in enumerate(shared_blocks)]
    for i, b in enumerate(private_blocks):
        target = (ours.private[ours.letters[b]] if b in shared_blocks
                  else ours.model.get_submodule(names[b]))
        pairs.append((theirs.private_layers[i], target))
    return pairs


class _Holder(nn.Module):
    """A lone parameter as a module (so coefficients pair like blocks)."""

    def __init__(self, param: nn.Parameter) -> None:
        super().__init__()
        self.param = param


def name_map(method: str, theirs: nn.Module, ours: Any) -> dict[str, str]:
    """The authors' parameter names -> fedlight's, for the same tensors (checked by shape)."""
    full_theirs = {id(p): n for n, p in theirs.named_parameters()}
    full_ours = {id(p): n for n, p in ours.named_parameters()}
    names = {}
    for source, target in module_pairs(method, theirs, ours):
        for a, b in zip(source.parameters(), target.parameters(), strict=True):
            names[full_theirs[id(a)]] = full_ours[id(b)]
            if a.numel() != b.numel() and not isinstance(source, _Holder):
                raise SystemExit(f"{method}: the authors' {full_theirs[id(a)]} {tuple(a.shape)} "
                                 f"does not match fedlight's {full_ours[id(b)]} {tuple(b.shape)}")
    if len(names) != len(full_theirs) or len(names) != len(full_ours):
        raise SystemExit(f"{method}: {len(full_theirs)} authors' parameters, {len(full_ours)} "
                         f"fedlight's, {len(names)} paired")
    return names


def copy_weights(theirs: nn.Module, ours: nn.Module, names: dict[str, str]) -> None:
    state = dict(ours.named_parameters())
    with torch.no_grad():
        for name, param in theirs.named_parameters():
            target = state[names[name]]
            if target.numel() == param.numel():  # (paper-form AutoCS's beta: both uniform)
                target.copy_(param.reshape(target.shape))


def fedlight_rounds(client: Any, folder: Path, rounds: int, batch: int, root: Path
                    ) -> tuple[list[float], list[float], Any]:
    """fedlight's run on ``folder`` from the client's current weights: the personalized
    accuracy (%, mean over clients, scored after local training) and the global model's
    (%, NaN where there is none) after each round, and the trainer."""
    from fedlight.data import FederatedDataModule
    from fedlight.data.sources.pfllib import PFLlib
    from fedlight.federation.trainer import FederatedTrainer

    count = json.loads((folder / "config.json").read_text())["num_clients"]
    data = FederatedDataModule(source=PFLlib(root=str(folder)), num_clients=count)
    trainer = FederatedTrainer(
        rounds=rounds, local_epochs=EPOCHS, batch_size=batch, weighting="uniform", seed=SEED,
        reinitialize=False, gradient_clip_val=CLIP, eval_batch_size=100_000,
        accelerator="cpu", devices=1, threads=1, batched_clients=1,
        memory_format="contiguous", default_root_dir=str(root), progress_bar=False,
        logger="csv", checkpoint_every=1000, verbose=False)
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.fit(client, data)
    personalized = [100 * row["personalized_accuracy_mean"] for row in trainer.history]
    global_ = [100 * (row.get("global_accuracy") or float("nan")) for row in trainer.history]
    return personalized, global_, trainer


# ===================================================================== the comparison
def parameter_differences(method: str, server: Any, trainer: Any, names: dict[str, str]
                          ) -> dict[str, float]:
    """The largest |fedlight - authors| after the last round: the shared model (and, for the
    learned ways, the coefficients apart), and every client's private copies."""
    shared = trainer.global_state
    gaps: dict[str, float] = {}
    for name, value in server.model.state_dict().items():
        if "private" in name:
            continue
        part = "coefficients" if "coefs" in name else "shared"
        if shared[names[name]].numel() != value.numel():
            continue
        gap = (shared[names[name]].reshape(value.shape) - value).abs().max().item()
        gaps[part] = max(gaps.get(part, 0.0), gap)
    for client, private in server.private_models.items():
        stored = trainer.client_states[client]
        for name, value in private.state_dict().items():
            gap = (stored[names[f"private_layers.{name}"]] - value).abs().max().item()
            gaps["private"] = max(gaps.get("private", 0.0), gap)
    return gaps


def choices(coefficients: Sequence[Tensor], temperature: float = 1.0) -> dict[str, Any]:
    """Per block, the softmaxed coefficients of each fused output and the side each prefers
    (``shared`` / ``private``; the shared side on a tie)."""
    chosen: dict[str, Any] = {}
    for block, raw in zip(BLOCKS, coefficients, strict=True):
        weights = F.softmax(raw.detach().reshape(-1, 2).double() / temperature, dim=-1)
        chosen[block] = {"weights": [[round(w, 6) for w in row] for row in weights.tolist()],
                         "prefers": ["shared" if row[0] >= row[1] else "private"
                                     for row in weights.tolist()]}
    return chosen


def compare(method: str, code: SimpleNamespace, folder: Path, options: argparse.Namespace,
            scratch: Path) -> dict[str, Any]:
    clients = read_clients(folder)
    classes = int(json.loads((folder / "config.json").read_text())["num_classes"])
    feed = GumbelFeed()
    model = authors_model(code, method, classes, options.init_seed)
    ours = fedlight_client(method, classes, options.paper_form)
    names = name_map(method, model, ours)
    copy_weights(model, ours, names)
    server = authors_server(code, method, model, clients, feed, options.batch,
                            options.authors_mean)
    theirs, theirs_global = authors_rounds(server, options.rounds)
    mine, mine_global, trainer = fedlight_rounds(ours, folder, options.rounds, options.batch,
                                                 scratch / f"runs-{method}")
    name = (f"Privatize {method}" if method in BLOCK_STRINGS
            else {"autocs": "AutoCS", "autosa": "AutoSA", "autohs": "AutoHS"}[method])
    record: dict[str, Any] = {
        "method": name + MEAN_LABELS[options.authors_mean],
        "authors_mean": options.authors_mean,
        "fedlight_arguments": {k: v for k, v in ours.construction.items()
                               if k not in ("backbone", "num_classes", "input_shape")},
        "per_round": [{"round": i + 1, "fedlight": round(a, 4), "authors": round(b, 4),
                       **({"fedlight_global": round(c, 4), "authors_global": round(d, 4)}
                          if ours.has_global_model else {})}
                      for i, (a, b, c, d) in enumerate(zip(mine, theirs, mine_global,
                                                           theirs_global, strict=True))],
        "max_param_diff": parameter_differences(method, server, trainer, names),
    }
    if method not in BLOCK_STRINGS:
        final = trainer.global_state
        temperature = 1.0 if getattr(ours, "hard", False) else ours.temperature
        record["choices"] = {"fedlight": choices([final["alpha"], final["beta"]], temperature),
                             "authors": choices(list(server.model.shared_coefs))}
    return record


def authors_commit(authors: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(authors), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def print_record(record: dict[str, Any]) -> None:
    print(f"{record['method']} ({record['fedlight_arguments']})")
    print("round  authors (%)  fedlight (%)  difference")
    for row in record["per_round"]:
        print(f"{row['round']:5d}  {row['authors']:11.2f}  {row['fedlight']:12.2f}  "
              f"{row['fedlight'] - row['authors']:+10.2f}")
    print("after the last round, largest |fedlight - authors|: "
          + ", ".join(f"{k} {v:.3e}" for k, v in record["max_param_diff"].items()))
    if "choices" in record:
        for side, chosen in record["choices"].items():
            print(f"  {side} chooses: " + "; ".join(
                f"{block} {c['prefers']} {c['weights']}" for block, c in chosen.items()))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("authors", type=Path, nargs="?",
                        help="a checkout of FedPS-AggregateOrNot")
    parser.add_argument("--self-test", action="store_true", help="against a stand-in for the "
                        f"authors' modules written here ({', '.join(STAND_IN_METHODS)})")
    parser.add_argument("--methods", nargs="+", help="default: AaBb ABb ab autocs autosa "
                        "autohs (--self-test: all but ABb)",
                        choices=[*BLOCK_STRINGS, *AUTO_WAYS])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64, help="local batch size (the authors' "
                        "64; each client needs 3 batches or more: their client takes at least "
                        "5 steps a round)")
    parser.add_argument("--folder", type=Path, help="a PFLlib-layout client folder")
    parser.add_argument("--data-root", type=Path, help="a CIFAR-10 ImageFolder to split")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--classes-per-client", type=int, default=5)
    parser.add_argument("--max-client-samples", type=int, default=250)
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--split-dir", type=Path, help="where to export the --data-root split "
                        "(default: a temporary folder); give it as --folder to later runs")
    parser.add_argument("--init-seed", type=int, default=0,
                        help="torch.manual_seed before the authors' model is built")
    parser.add_argument("--authors-mean", choices=sorted(MEAN_LABELS), default="float64",
                        help="float64 (default): the authors' mean of the shared tensors sums "
                        "in float64 (their torch.stack made float64), rounded once as "
                        "fedlight's; float32: as their code computes it")
    parser.add_argument("--paper-form", action="store_true",
                        help="fedlight's defaults (the paper's form), not the authors' switches")
    parser.add_argument("--out", type=Path, help="write <out>/<method>.json per comparison")
    options = parser.parse_args(argv)
    if options.authors is None and not options.self_test:
        parser.error("give the authors' checkout, or --self-test")
    options.methods = options.methods or (list(STAND_IN_METHODS) if options.self_test
                                          else ["AaBb", "ABb", "ab", *AUTO_WAYS])
    if options.self_test and not set(options.methods) <= set(STAND_IN_METHODS):
        parser.error(f"--self-test runs {', '.join(STAND_IN_METHODS)}")
    register_backbone()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    command = shlex.join(["python", "benchmarks/privatize_vs_authors.py",
                          *(sys.argv[1:] if argv is None else argv)])
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        authors = options.authors.resolve() if options.authors else scratch / "stand_in"
        if options.self_test:
            write_stand_in(authors)
        code = import_authors(authors)
        if options.folder:
            folder = options.folder.resolve()
            described = folder / SPLIT_FILE
            split: dict[str, Any] = (json.loads(described.read_text()) if described.is_file()
                                     else {"folder": str(options.folder)})
        elif options.data_root:
            folder = options.split_dir or scratch / "cifar10_split"
            split = export_cifar10(options, folder)
        else:
            folder = scratch / "random_clients"
            write_random_clients(folder, clients=3, train=130, test=20)
            split = {"dataset": "random images", "clients": 3, "seed": 1}
        for method in options.methods:
            record = {**compare(method, code, folder, options, scratch),
                      "authors_repo": "lxcnju/FedPS-AggregateOrNot",
                      "authors_commit": authors_commit(authors), "split": split,
                      "rounds": options.rounds, "command": command}
            print_record(record)
            if options.out:
                options.out.mkdir(parents=True, exist_ok=True)
                name = f"privatize_{method}" if method in BLOCK_STRINGS else method
                suffix = "_float32_mean" if options.authors_mean == "float32" else ""
                (options.out / f"{name}{suffix}.json").write_text(
                    json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
