"""Method-specific behaviour of the baselines: FedProx, FedPer, FedRep, FedBN, LG-FedAvg, Ditto,
FedRoD, FedProto."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fedlight.clients import (
    ClientContext,
    Ditto,
    FedAvg,
    FedBN,
    FedPer,
    FedProto,
    FedProx,
    FedRep,
    FedRoD,
    LGFedAvg,
)
from fedlight.clients.fedrod import balanced_softmax_loss
from fedlight.core.rules import Report, ServerContext, SingleProcess
from tests.conftest import tiny_data, tiny_trainer


def make(cls, **kwargs):
    torch.manual_seed(0)
    return cls(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8), "lr": 0.1,
                  **kwargs})


def context(data, client_id: int = 0) -> ClientContext:
    data.setup("fit")
    return ClientContext(client_id=client_id, round=0, rounds=1, join_ratio=1.0,
                         class_counts=data.class_counts(client_id),
                         train_data=data.client_train(client_id), batch_size=16)


def keys_under(client, prefix: str) -> set[str]:
    return {k for k in client.state_dict() if k.startswith(prefix)}


# ------------------------------------------------------------------------------ bad arguments
@pytest.mark.parametrize(("cls", "kwargs", "message"), [
    (FedProx, {"mu": -0.1}, "mu .* got -0.1"),
    (FedRep, {"head_epochs": -1}, "head_epochs must be >= 0, got -1"),
    (Ditto, {"lamda": -1.0}, "lamda .* got -1.0"),
    (Ditto, {"personal_epochs": 0}, "personal_epochs must be at least 1, got 0"),
    (FedRoD, {"generic_loss": "focal"}, "'focal'; valid: bsm, ce"),
    (FedProto, {"lamda": -2.0}, "lamda .* got -2.0"),
    (FedProto, {"predict_by": "knn"}, "'knn'; valid: head, prototype"),
    (FedBN, {"backbone": "mlp"}, "backbone 'mlp' has none; use e.g. 'cnn_bn'"),
])
def test_bad_constructor_values_are_named(cls, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(cls, **kwargs)


# ------------------------------------------------------------------------------ partitions
def test_fedper_keeps_the_head_and_lgfedavg_the_encoder():
    fedper, lg = make(FedPer), make(LGFedAvg)
    assert set(fedper.partition.private) == keys_under(fedper, "model.head.")
    assert set(fedper.partition.shared) == keys_under(fedper, "model.encoder.")
    assert set(lg.partition.private) == keys_under(lg, "model.encoder.")
    assert set(lg.partition.shared) == keys_under(lg, "model.head.")
    assert not fedper.has_global_model and not lg.has_global_model


# ------------------------------------------------------------------------------ FedProx
def test_fedprox_term_is_zero_at_round_start_and_pulls_towards_the_received_weights():
    client = make(FedProx, mu=0.5)
    client.on_round_start(0, {})
    assert client.proximal_term().item() == 0.0
    received = {n: p.detach().clone() for n, p in client.named_parameters()}
    torch.manual_seed(1)
    deltas = {n: torch.randn_like(p) for n, p in client.named_parameters()}
    with torch.no_grad():
        for n, p in client.named_parameters():
            p.add_(deltas[n])
    term = client.proximal_term()
    expected = 0.25 * sum(d.pow(2).sum() for d in deltas.values())
    assert torch.allclose(term, expected)
    term.backward()
    for n, p in client.named_parameters():
        assert torch.allclose(p.grad, 0.5 * deltas[n])  # mu * (w - w^t)
    with torch.no_grad():  # a gradient step on the term alone moves every weight closer
        for n, p in client.named_parameters():
            before = (p - received[n]).norm()
            assert (p - 0.1 * p.grad - received[n]).norm() < before


def test_fedprox_with_mu_zero_is_fedavg(tmp_path):
    data = tiny_data()
    fedavg = tiny_trainer(tmp_path, rounds=2, run_name="avg")
    fedavg.fit(make(FedAvg), data)
    fedprox = tiny_trainer(tmp_path, rounds=2, run_name="prox")
    fedprox.fit(make(FedProx, mu=0.0), tiny_data())
    for key, value in fedavg.global_state.items():
        assert torch.equal(fedprox.global_state[key], value), key


# ------------------------------------------------------------------------------ FedRep
class RecordingFedRep(FedRep):
    """Checks, at every optimizer step, which parameters have gradients, and snapshots them."""

    def on_round_start(self, round, message):
        self.log_rows = []
        self.start = {n: p.detach().clone() for n, p in self.named_parameters()}

    def on_before_optimizer_step(self, optimizer):
        encoder = [p.grad is not None for p in self.model.encoder.parameters()]
        head = [p.grad is not None for p in self.model.head.parameters()]
        snapshot = {n: p.detach().clone() for n, p in self.named_parameters()}
        self.log_rows.append((self.phase, all(encoder), any(encoder), all(head), any(head),
                              snapshot))


def test_fedrep_trains_the_head_with_the_encoder_frozen_then_the_encoder_with_the_head_frozen(
        tmp_path):
    trainer = tiny_trainer(tmp_path, rounds=1)
    client = make(RecordingFedRep, head_epochs=2)
    data = tiny_data(num_clients=1)
    trainer.fit(client, data)
    phases = [row[0] for row in client.log_rows]
    steps_per_epoch = phases.count("body")
    assert phases == ["head"] * 2 * steps_per_epoch + ["body"] * steps_per_epoch
    for phase, enc_all, enc_any, head_all, head_any, _ in client.log_rows:
        if phase == "head":
            assert head_all and not enc_any  # encoder grads are None
        else:
            assert enc_all and not head_any  # head grads are None
    first_body = client.log_rows[phases.index("body")][5]
    for name, value in first_body.items():  # end of the head phase
        unchanged = torch.equal(value, client.start[name])
        assert unchanged == name.startswith("model.encoder."), name
    final = trainer.client_states[0]
    for name in ("model.head.weight", "model.head.bias"):  # the body phase left the head alone
        assert torch.equal(final[name], first_body[name])
    assert not torch.equal(trainer.global_state["model.encoder.fc.0.weight"],
                           first_body["model.encoder.fc.0.weight"])


def test_fedrep_phases_follow_the_arguments():
    assert [(p.name, p.epochs) for p in make(FedRep).local_phases(3)] == [("head", 10),
                                                                         ("body", 3)]
    assert [p.name for p in make(FedRep, head_epochs=0).local_phases(1)] == ["body"]


# ------------------------------------------------------------------------------ FedBN
def test_fedbn_keeps_batchnorm_private_and_shares_the_convolutions(tmp_path):
    data = tiny_data(num_clients=3, partition="pathological", shape=(1, 16, 16),
                     samples=120)
    trainer = tiny_trainer(tmp_path, rounds=2)
    torch.manual_seed(0)
    client = FedBN(num_classes=4, input_shape=(1, 16, 16), lr=0.05)
    trainer.fit(client, data)
    bn_keys = set(client.state_keys_of_type((torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)))
    assert "model.encoder.features.1.running_mean" in bn_keys
    assert "model.encoder.features.1.num_batches_tracked" in bn_keys
    assert set(client.partition.private) == bn_keys
    assert not bn_keys & set(trainer.global_state)
    assert "model.encoder.features.0.weight" in trainer.global_state  # a conv weight
    states = [trainer.client_states[i] for i in range(3)]
    assert all(set(s) == bn_keys for s in states)
    for key in ("model.encoder.features.1.running_mean", "model.encoder.features.1.weight",
                "model.encoder.fc.1.running_var"):
        assert not torch.equal(states[0][key], states[1][key]), key
        assert not torch.equal(states[1][key], states[2][key]), key
    # every client evaluates with the one global conv stack: loading a client gives it
    for i in range(3):
        trainer.load_client(i, trainer.rounds)
        conv = client.state_dict()["model.encoder.features.0.weight"]
        assert torch.equal(conv, trainer.global_state["model.encoder.features.0.weight"])


# ------------------------------------------------------------------------------ Ditto
def test_ditto_personal_model_stays_private_and_is_regularized_to_the_received_weights():
    client = make(Ditto, lamda=0.4)
    personal = keys_under(client, "personal.")
    assert set(client.partition.private) == personal
    assert set(client.partition.shared) == keys_under(client, "model.")
    assert client.has_global_model
    client.on_round_start(0, {})
    assert client.regularizer().item() == 0.0  # the personal model starts as the global one
    received = [p.detach().clone() for p in client.model.parameters()]
    with torch.no_grad():  # the global phase moves w away from w^t ...
        for p in client.model.parameters():
            p.add_(1.0)
        for p in client.personal.parameters():
            p.add_(0.5)
    reg = client.regularizer()  # ... but the regularizer still uses w^t
    deltas = [v.detach() - w for v, w in zip(client.personal.parameters(), received,
                                             strict=True)]
    assert torch.allclose(reg, 0.2 * sum(d.pow(2).sum() for d in deltas))
    reg.backward()
    for v, d in zip(client.personal.parameters(), deltas, strict=True):
        assert torch.allclose(v.grad, 0.4 * d)
    assert all(p.grad is None for p in client.model.parameters())
    assert not set(client.upload().state) & personal


def test_ditto_phases_upload_the_global_model_and_predict_with_the_personal_one(tmp_path):
    client = make(Ditto, personal_epochs=2)
    phases = client.local_phases(1)
    assert [(p.name, p.epochs, p.trainable, p.upload_after) for p in phases] == [
        ("global", 1, ("model.*",), True), ("personal", 2, ("personal.*",), False)]
    trainer = tiny_trainer(tmp_path, rounds=2)
    summary = trainer.fit(client, tiny_data())
    assert summary["last_global_accuracy"] is not None
    assert all(set(s) == keys_under(client, "personal.") for s in trainer.client_states.values())
    x = torch.randn(5, 1, 8, 8)
    client.eval()
    assert torch.equal(client(x), client.personal(x))
    assert torch.equal(client.global_forward(x), client.model(x))
    trainer.load_client(0, trainer.rounds)
    assert not torch.equal(client(x), client.global_forward(x))


# ------------------------------------------------------------------------------ FedRoD
def test_balanced_softmax_is_cross_entropy_under_a_uniform_prior_and_shifts_otherwise():
    torch.manual_seed(0)
    logits, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 3, 0, 1])
    uniform = balanced_softmax_loss(logits, y, torch.full((4,), 7.0))
    assert torch.allclose(uniform, F.cross_entropy(logits, y))
    counts = torch.tensor([1.0, 2.0, 3.0, 4.0])
    by_hand = F.cross_entropy(logits + torch.log(counts / 10), y)
    assert torch.allclose(balanced_softmax_loss(logits, y, counts), by_hand)
    absent = balanced_softmax_loss(logits[:2], y[:2], torch.tensor([3.0, 1.0, 0.0, 0.0]))
    assert torch.isfinite(absent)  # classes the client lacks drop out of the softmax


def test_fedrod_personal_loss_trains_only_the_personal_head():
    data = tiny_data(partition="pathological")
    client = make(FedRoD)
    client.context = context(data)
    x, y = client.context.train_data
    client.training_step((x, y), 0).backward()
    total = {n: p.grad.clone() for n, p in client.named_parameters()}
    client.zero_grad()
    generic = client.model.head(client.model.encoder(x))
    balanced_softmax_loss(generic, y, client.context.class_counts).backward()
    for name, param in client.named_parameters():
        if name.startswith("personal_head."):
            assert param.grad is None and total[name].abs().sum() > 0
        else:  # encoder and generic head: the gradient of the balanced softmax only
            assert torch.allclose(total[name], param.grad, atol=1e-7), name
    features = client.model.encoder(x)
    assert torch.equal(client(x), client.model.head(features) + client.personal_head(features))
    assert torch.equal(client.global_forward(x), client.model(x))
    assert set(client.partition.private) == {"personal_head.weight", "personal_head.bias"}
    assert client.has_global_model


# ------------------------------------------------------------------------------ FedProto
def test_fedproto_server_prototypes_are_the_count_weighted_mean():
    a = {"prototypes": torch.tensor([[1.0, 0.0], [2.0, 2.0], [0.0, 0.0]]),
         "counts": torch.tensor([1.0, 3.0, 0.0])}
    b = {"prototypes": torch.tensor([[3.0, 4.0], [0.0, 0.0], [0.0, 0.0]]),
         "counts": torch.tensor([3.0, 0.0, 0.0])}
    rule = FedProto(num_classes=3, input_shape=(1, 8, 8), backbone="mlp").configure_server()
    rule.setup({}, ServerContext(num_clients=3, rounds=1, join_ratio=1.0))
    rule.begin_round(0)
    for client_id, payload in ((0, a), (2, {}), (1, b)):  # weights play no part
        rule.add(Report(client_id, {}, 10.0 if client_id == 0 else 1.0, payload))
    rule.end_round(SingleProcess())
    out = rule.message
    assert torch.allclose(out["prototypes"], torch.tensor([[2.5, 3.0], [2.0, 2.0], [0.0, 0.0]]))
    assert torch.equal(out["counts"], torch.tensor([4.0, 3.0, 0.0]))
    rule.begin_round(1)
    rule.end_round(SingleProcess())  # a round without prototypes keeps the last table
    assert torch.equal(rule.message["counts"], torch.tensor([4.0, 3.0, 0.0]))


def test_fedproto_round_trip_shares_only_prototypes(tmp_path):
    data = tiny_data(num_clients=3, partition="pathological")
    client = make(FedProto)
    trainer = tiny_trainer(tmp_path, rounds=2)
    summary = trainer.fit(client, data)
    assert client.partition.shared == () and trainer.global_state == {}
    assert summary["last_global_accuracy"] is None
    # the server's table is the count-weighted mean of the clients' final prototypes
    sums = torch.zeros(4, client.model.feature_dim)
    counts = torch.zeros(4)
    for i in range(3):
        trainer.load_client(i, trainer.rounds)
        prototypes, n = client.local_prototypes(*trainer.population.train_data[i])
        sums += prototypes * n.unsqueeze(1)
        counts += n
    assert torch.allclose(trainer.message["prototypes"], sums / counts.clamp_min(1).unsqueeze(1),
                          atol=1e-5)
    assert torch.equal(trainer.message["counts"], counts)
    assert "prototype_accuracy" in trainer.history[-1]
    # prototypes a client received in round 2 are in its private state
    trainer.load_client(0, trainer.rounds)
    assert client.prototype_mask.any()


def test_fedproto_loss_uses_only_classes_with_a_global_prototype():
    client = make(FedProto, lamda=2.0)
    features = torch.tensor([[1.0, 2.0], [3.0, 3.0]])
    client.global_prototypes = torch.tensor([[0.0, 0.0], [1.0, 1.0], [9.0, 9.0], [0.0, 0.0]])
    client.prototype_mask = torch.tensor([False, True, False, False])
    y = torch.tensor([1, 2])  # class 2 has no global prototype
    assert torch.allclose(client.prototype_loss(features, y), torch.tensor((0 + 1) / 4))
    logits = client.prototype_logits(torch.tensor([[0.9, 1.2], [8.0, 8.0]]))
    assert logits.argmax(-1).tolist() == [1, 1]  # only class 1 has a prototype


def test_fedproto_prototype_prediction_picks_the_nearest_global_prototype():
    client = make(FedProto, predict_by="prototype")
    x = torch.randn(6, 1, 8, 8)
    client.eval()
    assert torch.equal(client(x), client.model(x))  # no prototype yet: the head decides
    features = client.model.encoder(x).detach()
    client.on_round_start(1, {"prototypes": torch.stack([features[0], features[1],
                                                         features[2], features[3]]),
                              "counts": torch.ones(4)})
    assert client(x[:4]).argmax(-1).tolist() == [0, 1, 2, 3]
    assert set(client.eval_outputs(x)) == {"personalized", "head"}


def test_ditto_global_model_is_trained_exactly_as_fedavg(tmp_path):
    fedavg = tiny_trainer(tmp_path, rounds=2, join_ratio=0.5, run_name="avg")
    fedavg.fit(make(FedAvg), tiny_data())
    ditto = tiny_trainer(tmp_path, rounds=2, join_ratio=0.5, run_name="ditto")
    ditto.fit(make(Ditto), tiny_data())
    for key, value in fedavg.global_state.items():
        assert torch.equal(ditto.global_state[key], value), key
