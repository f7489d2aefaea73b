"""The contract every client class meets, run over every class in ``fedlight.clients.CLIENTS``
(a new method file joins automatically).

Each class is built with its defaults plus ``num_classes`` / ``input_shape`` (so with its own
default backbone) on synthetic 1x28x28 data:

* what leaves a client is exactly its shared partition: no private tensor in an upload;
* averaging identical uploads gives back that upload;
* the same seed gives the same metrics, and a resumed run the same as an uninterrupted one;
* a few local steps on a tiny batch lower the method's own loss, in every local phase.

The first two contracts, plus "same seed same metrics" and an exact resume, are also run for
the methods the papers run on token ids, character sequences and sensor signals (GPFL, FedPer,
FedRep, FedAvg and a privatization block string), on tiny files in the datasets' own formats.
"""

from __future__ import annotations

import csv
import functools

import pytest
import torch
from lightning.fabric import Fabric

from fedlight.clients import CLIENTS, ClientContext, FederatedClient, Phase
from fedlight.core.noise import reseed_noise
from fedlight.core.rules import weighted_mean
from fedlight.data import FederatedDataModule
from fedlight.data.partitions.dirichlet import Dirichlet
from fedlight.data.partitions.natural import Natural
from fedlight.data.sources import SOURCES
from fedlight.federation.training_loop import TrainingLoop
from tests.conftest import tiny_data, tiny_trainer
from tests.text_fixtures import write_agnews, write_har, write_shakespeare

NUM_CLASSES = 4
SHAPE = (1, 28, 28)
CLASSES = sorted(CLIENTS.items())
IDS = [name for name, _ in CLASSES]


def build(cls: type[FederatedClient]) -> FederatedClient:
    torch.manual_seed(0)
    return cls(num_classes=NUM_CLASSES, input_shape=SHAPE)


def data(num_clients: int = 2, samples: int = 16):
    return tiny_data(num_clients=num_clients, shape=SHAPE, samples=samples,
                     classes=NUM_CLASSES, public_samples=2)  # for server-side methods


def started(cls: type[FederatedClient]) -> FederatedClient:
    """A client in the state the trainer puts it in before its first local phase."""
    client = build(cls)
    module = data()
    module.setup("fit")
    client.context = ClientContext(
        client_id=0, round=0, rounds=2, join_ratio=1.0, class_counts=module.class_counts(0),
        participations=0, train_data=module.client_train(0), batch_size=10)
    torch.manual_seed(0)
    client.train()
    client.on_round_start(0, {})
    return client


@pytest.mark.parametrize(("name", "cls"), CLASSES, ids=IDS)
def test_upload_holds_exactly_the_shared_partition(name, cls):
    client = started(cls)
    upload = client.upload()
    partition = client.partition
    assert list(upload.state) == list(partition.shared), name
    assert not set(upload.state) & set(partition.private)
    assert not set(upload.payload) & set(partition.private)
    private_storage = {t.untyped_storage().data_ptr() for k, t in client.state_dict().items()
                       if k in set(partition.private) and t.numel()}
    sent = [*upload.state.items(), *[(k, v) for k, v in upload.payload.items()
                                     if isinstance(v, torch.Tensor)]]
    for key, tensor in sent:  # copies, never views of the live private tensors
        assert tensor.untyped_storage().data_ptr() not in private_storage, key


@pytest.mark.parametrize(("name", "cls"), CLASSES, ids=IDS)
def test_aggregating_identical_uploads_returns_that_upload(name, cls):
    state = started(cls).upload().state
    mean = weighted_mean([dict(state) for _ in range(3)], [1.0, 2.0, 7.0])
    assert set(mean) == set(state)
    for key, value in state.items():
        assert mean[key].dtype == value.dtype and torch.equal(mean[key], value), key


def _metrics(run_dir) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv") as handle:
        return [{k: v for k, v in row.items() if k != "seconds"} for row in csv.DictReader(handle)]


@pytest.mark.parametrize(("name", "cls"), CLASSES, ids=IDS)
def test_same_seed_and_a_resumed_run_give_the_same_metrics(name, cls, tmp_path, monkeypatch):
    assert_resume_is_exact(tmp_path, monkeypatch, lambda: build(cls), data)


def assert_resume_is_exact(tmp_path, monkeypatch, make_client, make_data) -> None:
    """Run a: 2 rounds. Run b: 1 round, then resumed from its checkpoint to 2 rounds. Same
    metrics rows, global state and client states."""
    # the figures are not under test here and cost half of a tiny run
    monkeypatch.setattr("fedlight.federation.outputs.writer.plot_curves", lambda *args: None)
    monkeypatch.setattr("fedlight.data.datamodule.save_heatmap", lambda *args: None)
    trainers = {}
    for run, rounds, ckpt_path in (("a", 2, None), ("b", 1, None), ("b", 2, "last")):
        trainers[run] = tiny_trainer(tmp_path, rounds=rounds, join_ratio=0.5, batch_size=10,
                                     run_name=run, checkpoint_every=1)
        if ckpt_path and getattr(make_client(), "reads_planned_rounds", False):
            # extending a method that reads the planned rounds would change it: refused
            with pytest.raises(ValueError, match="planned number of rounds"):
                trainers[run].fit(make_client(), make_data(), ckpt_path=ckpt_path)
            return
        trainers[run].fit(make_client(), make_data(), ckpt_path=ckpt_path)
    full, resumed = _metrics(tmp_path / "a"), _metrics(tmp_path / "b")
    assert len(full) == 2 and full == resumed
    for key, value in trainers["a"].global_state.items():
        assert torch.equal(value, trainers["b"].global_state[key]), key
    for client_id, state in trainers["a"].client_states.items():
        for key, value in state.items():
            assert torch.equal(value, trainers["b"].client_states[client_id][key]), key


def _record_loss(losses: list[float], output, *_) -> None:
    losses.append(float((output["loss"] if isinstance(output, dict) else output).detach()))


@pytest.mark.parametrize(("name", "cls"), CLASSES, ids=IDS)
def test_local_steps_lower_the_loss_in_every_phase(name, cls):
    client = started(cls)
    batch = client.context.train_data
    loop = TrainingLoop(Fabric(accelerator="cpu", devices=1), batch_size=len(batch[1]))

    def same_batch_same_noise():
        for _ in range(8):
            torch.manual_seed(1)  # the same noise (dropout, Gumbel, ...) at every step
            reseed_noise(client, 1)
            yield batch

    for phase in client.local_phases(1):
        if phase.epochs == 0:
            continue
        losses: list[float] = []
        client.on_train_batch_end = functools.partial(_record_loss, losses)
        loop.run_phase(client, Phase(phase.name, 1, phase.trainable, lr_scale=phase.lr_scale),
                       same_batch_same_noise)
        assert losses[-1] < losses[0], f"{name}, phase {phase.name!r}: {losses}"


# ===================================================================== other modalities
#: modality -> (source, fixture writer, backbone, small backbone options, data options)
MODALITIES = {
    "tokens": ("agnews", write_agnews, "fasttext", {"embed_dim": 8},
               {"partition": Dirichlet(beta=1.0, min_client_size=2),
                "merge_test": True}),
    "characters": ("shakespeare", write_shakespeare, "char_lstm", {"hidden_size": 16},
                   {"partition": Natural(), "merge_test": True, "train_fraction": 0.8}),
    "signals": ("har", write_har, "har_cnn", {"fc_dims": (32, 16)},
                {"partition": Natural(), "merge_test": True}),
}
PAPER_METHODS = {"FedAvg": {}, "FedPer": {}, "FedRep": {}, "GPFL": {},
                 "Privatize": {"way": "AaBb"}}
MODALITY_CASES = [(m, c) for m in MODALITIES for c in PAPER_METHODS]


@pytest.fixture(scope="module")
def modality_roots(tmp_path_factory):
    """One fixture folder per modality, written once for the module."""
    return {name: spec[1](tmp_path_factory.mktemp(name)) for name, spec in MODALITIES.items()}


def modality_data(modality: str, root) -> FederatedDataModule:
    source, _, _, _, options = MODALITIES[modality]
    return FederatedDataModule(source=SOURCES[source](root=str(root)), num_clients=2, seed=0,
                               **options)


def modality_client(modality: str, method: str, datamodule) -> FederatedClient:
    _, _, backbone, backbone_options, _ = MODALITIES[modality]
    datamodule.setup()
    torch.manual_seed(0)
    return CLIENTS[method](backbone=backbone, backbone_kwargs=backbone_options,
                          num_classes=datamodule.num_classes,
                          input_shape=datamodule.input_shape, vocab_size=datamodule.vocab_size,
                          **PAPER_METHODS[method])


@pytest.mark.parametrize(("modality", "method"), MODALITY_CASES)
def test_modality_upload_holds_exactly_the_shared_partition(modality, method, modality_roots):
    module = modality_data(modality, modality_roots[modality])
    client = modality_client(modality, method, module)
    x, _ = module.client_train(0)
    assert x.dtype == (torch.float32 if modality == "signals" else torch.int64)
    client.context = ClientContext(
        client_id=0, round=0, rounds=2, join_ratio=1.0, class_counts=module.class_counts(0),
        participations=0, train_data=module.client_train(0), batch_size=10)
    client.train()
    client.on_round_start(0, {})
    upload = client.upload()
    assert list(upload.state) == list(client.partition.shared)
    assert not set(upload.state) & set(client.partition.private)
    assert not set(upload.payload) & set(client.partition.private)


@pytest.mark.parametrize(("modality", "method"), MODALITY_CASES)
def test_modality_same_seed_and_a_resumed_run_give_the_same_metrics(modality, method, tmp_path,
                                                                     monkeypatch,
                                                                     modality_roots):
    root = modality_roots[modality]
    assert_resume_is_exact(
        tmp_path, monkeypatch,
        lambda: modality_client(modality, method, modality_data(modality, root)),
        lambda: modality_data(modality, root))
