import csv
import math

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from fedlight.clients import CLIENTS, GPFL, ClientContext, FedAvg
from tests.conftest import tiny_data, tiny_trainer

NUM_CLASSES = 4


def make_gpfl(**kwargs) -> GPFL:
    torch.manual_seed(0)
    return GPFL(**{"backbone": "mlp", "num_classes": NUM_CLASSES, "input_shape": (1, 8, 8),
                   "lr": 0.1, **kwargs})


def batch(size: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(size, 1, 8, 8, generator=generator), torch.arange(size) % NUM_CLASSES


def with_context(client: GPFL, counts=(3.0, 1.0, 0.0, 4.0)) -> GPFL:
    client.context = ClientContext(client_id=0, round=0, rounds=1, join_ratio=1.0,
                                   class_counts=torch.tensor(counts))
    client.on_round_start(0, {})
    return client


def hand_loss(client: GPFL, x, y, f_g, f_p, alg: bool = True, mlg: bool = True):
    """L_P + L_alg + lamda * L_mlg written out element by element."""
    loss = F.cross_entropy(client.model.head(f_p), y)
    table = client.gce.weight if client.gce is not None else None
    if alg:
        sims = torch.stack([torch.stack([
            (f_g[i] @ table[u]) / (f_g[i].norm() * table[u].norm())
            for u in range(NUM_CLASSES)]) for i in range(len(y))])
        loss = loss + (-torch.log(torch.exp(sims[range(len(y)), y]) / torch.exp(sims).sum(1))
                       ).mean()
    if mlg:
        diff = f_g - client.C_hat[y]
        loss = loss + client.lamda * torch.sqrt((diff ** 2).sum())
    return loss


# ------------------------------------------------------------------------- conditional inputs
def test_frozen_table_gets_no_gradient_while_the_trainable_one_does():
    client = with_context(make_gpfl())
    before = client.C_hat.clone()
    optimizer = client.configure_optimizers()
    client.training_step(batch(), 0).backward()
    assert not client.C_hat.requires_grad and client.C_hat.grad is None
    assert client.gce.weight.grad is not None and client.gce.weight.grad.abs().sum() > 0
    optimizer.step()
    assert torch.equal(client.C_hat, before)
    assert not torch.equal(client.gce.weight.detach(), before)
    assert "C_hat" not in client.state_dict() and "g" not in client.state_dict()


def test_g_is_the_mean_of_frozen_rows_and_p_the_share_weighted_sum_over_U():
    client = with_context(make_gpfl(), counts=(3.0, 1.0, 0.0, 4.0))
    table = client.gce.weight.detach()
    assert torch.equal(client.C_hat, table)
    assert torch.allclose(client.g, table.mean(0))
    shares = [3 / 8, 1 / 8, 0.0, 4 / 8]
    expected = sum(shares[u] * table[u] for u in range(NUM_CLASSES)) / NUM_CLASSES
    assert torch.allclose(client.p, expected, atol=1e-6)


def test_cov_with_zero_gamma_and_beta_is_relu_of_the_feature():
    client = make_gpfl()
    for sub in (client.cov.gamma, client.cov.beta):
        torch.nn.init.zeros_(sub[2].weight)  # the LayerNorm's affine: output exactly 0
        torch.nn.init.zeros_(sub[2].bias)
    features = torch.randn(5, client.model.feature_dim)
    conditions = torch.randn(2, client.model.feature_dim)
    out = client.cov(features, conditions)
    assert torch.equal(out[0], F.relu(features)) and torch.equal(out[1], F.relu(features))


def test_loss_is_lp_plus_cosine_cross_entropy_plus_lambda_frobenius_norm():
    client = with_context(make_gpfl(lamda=0.5))
    x, y = batch()
    f_g, f_p = client.routes(x)
    client.capture_logs(True)
    loss = client.training_step((x, y), 0)
    assert torch.allclose(loss, hand_loss(client, x, y, f_g, f_p), atol=1e-5)
    assert torch.allclose(client.pop_federated_logs()["train_loss"], loss.detach())
    # L_alg alone, against a hand-written cross-entropy over cosine similarities.
    alg = F.cross_entropy(client.alignment_logits(f_g), y)
    no_alg = hand_loss(client, x, y, f_g, f_p, alg=False)
    assert torch.allclose(alg, hand_loss(client, x, y, f_g, f_p) - no_alg, atol=1e-5)


def test_mlg_is_one_unsquared_norm_of_the_whole_batch_difference():
    client = with_context(make_gpfl(lamda=1.0))
    x, y = batch()
    f_g, _ = client.routes(x)
    without = make_gpfl(lamda=1.0, use_mlg=False)
    with_context(without)
    difference = client.training_step((x, y), 0) - without.training_step((x, y), 0)
    rows = [(f_g[i] - client.C_hat[y[i]]).pow(2).sum() for i in range(len(y))]
    assert math.isclose(float(difference.detach()), math.sqrt(float(sum(rows))), rel_tol=1e-5)


# ------------------------------------------------------------------------- prediction, partition
def test_forward_is_the_personalized_route():
    client = with_context(make_gpfl())
    client.eval()
    x, _ = batch()
    f_g, f_p = client.routes(x)
    assert torch.allclose(client(x), client.model.head(f_p), atol=1e-6)
    assert not torch.allclose(client(x), client.model.head(f_g))


def test_head_is_private_and_never_uploaded_and_no_global_model(tmp_path):
    client = make_gpfl()
    assert set(client.partition.private) == {"model.head.weight", "model.head.bias"}
    assert any(k.startswith("cov.") for k in client.partition.shared)
    assert "gce.weight" in client.partition.shared
    assert not any(k.startswith("model.head") for k in with_context(client).upload().state)
    assert client.has_global_model is False

    trainer = tiny_trainer(tmp_path, rounds=2)
    summary = trainer.fit(make_gpfl(), tiny_data())
    assert not any(k.startswith("model.head") for k in trainer.global_state)
    heads = [trainer.client_states[i]["model.head.weight"] for i in range(4)]
    assert not torch.equal(heads[0], heads[1])
    assert summary["best_global_accuracy"] is None


def test_evaluation_conditions_on_the_latest_received_table():
    client = with_context(make_gpfl())
    with torch.no_grad():
        client.gce.weight.add_(1.0)  # as if the aggregated table had just been loaded
    client.context = ClientContext(0, 0, 1, 1.0, torch.tensor([1.0, 1.0, 1.0, 1.0]))
    client.eval()
    client(batch()[0])
    assert torch.equal(client.C_hat, client.gce.weight.detach())
    assert torch.allclose(client.p, client.gce.weight.detach().mean(0) / NUM_CLASSES, atol=1e-6)


def test_mu_is_weight_decay_on_cov_and_gce_only():
    client = make_gpfl(mu=0.3)
    groups = client.configure_optimizers().param_groups
    names = {id(p): n for n, p in client.named_parameters()}
    decayed = {names[id(p)] for g in groups if g["weight_decay"] == 0.3 for p in g["params"]}
    plain = {names[id(p)] for g in groups if g["weight_decay"] == 0.0 for p in g["params"]}
    assert decayed == {n for n in names.values() if n.startswith(("cov.", "gce."))}
    assert plain == {n for n in names.values() if n.startswith("model.")}
    assert all(g["momentum"] == 0 for g in groups)


# ------------------------------------------------------------------------- ablation switches
def keys(client: GPFL) -> set[str]:
    return set(client.state_dict())


def test_without_personalized_input_only_the_conditions_change():
    full, ablated = with_context(make_gpfl()), with_context(make_gpfl(personalized_input=False))
    assert keys(full) == keys(ablated)
    assert torch.equal(ablated.g, -torch.ones_like(full.g))
    assert torch.equal(ablated.p, torch.ones_like(full.p))
    full.g.copy_(ablated.g)
    full.p.copy_(ablated.p)
    x, y = batch()
    assert torch.equal(full.training_step((x, y), 0), ablated.training_step((x, y), 0))


def test_without_cov_both_routes_are_the_raw_feature_and_the_losses_stay():
    full = with_context(make_gpfl())
    ablated = make_gpfl(use_cov=False)
    ablated.load_state_dict({k: v for k, v in full.state_dict().items() if k in keys(ablated)})
    with_context(ablated)
    assert keys(full) - keys(ablated) == {k for k in keys(full) if k.startswith("cov.")}
    x, y = batch()
    f_g, f_p = ablated.routes(x)
    feature = full.model.encoder(x)
    assert torch.equal(f_g, feature) and torch.equal(f_p, feature)
    assert torch.allclose(ablated.training_step((x, y), 0),
                          hand_loss(ablated, x, y, feature, feature), atol=1e-5)


def test_without_mlg_only_the_mlg_term_goes():
    full = with_context(make_gpfl())
    ablated = with_context(make_gpfl(use_mlg=False))
    zero_lambda = with_context(make_gpfl(lamda=0.0))
    assert keys(full) == keys(ablated)
    assert torch.equal(full.p, ablated.p) and torch.equal(full.C_hat, ablated.C_hat)
    x, y = batch()
    assert torch.equal(ablated.training_step((x, y), 0), zero_lambda.training_step((x, y), 0))
    f_g, f_p = full.routes(x)
    assert torch.allclose(ablated.training_step((x, y), 0),
                          hand_loss(full, x, y, f_g, f_p, mlg=False), atol=1e-5)


def test_without_gce_no_table_no_guidance_and_constant_conditions():
    full = with_context(make_gpfl())
    ablated = make_gpfl(use_gce=False)
    assert keys(full) - keys(ablated) == {"gce.weight"}
    ablated.load_state_dict({k: v for k, v in full.state_dict().items() if k != "gce.weight"})
    with_context(ablated)
    assert ablated.C_hat is None and ablated.gce is None
    assert torch.equal(ablated.g, -torch.ones_like(full.g))
    assert torch.equal(ablated.p, torch.ones_like(full.p))
    x, y = batch()
    _, f_p = ablated.routes(x)
    assert torch.equal(ablated.training_step((x, y), 0),
                       F.cross_entropy(ablated.model.head(f_p), y))


@pytest.mark.parametrize("reference", ["FedAvg+private head", "FedPer"])
def test_without_cov_and_gce_gpfl_is_fedper(tmp_path, reference):
    base = dict(backbone="mlp", num_classes=NUM_CLASSES, input_shape=(1, 8, 8), lr=0.1)
    if reference == "FedPer":
        torch.manual_seed(0)
        fedper = CLIENTS["FedPer"](**base)
    else:
        torch.manual_seed(0)
        fedper = FedAvg(**base, extra_private=["model.head.*"])
    gpfl_trainer = tiny_trainer(tmp_path, rounds=2, run_name="gpfl")
    gpfl_trainer.fit(make_gpfl(use_cov=False, use_gce=False), tiny_data())
    fedper_trainer = tiny_trainer(tmp_path, rounds=2, run_name="fedper")
    fedper_trainer.fit(fedper, tiny_data())
    assert gpfl_trainer.global_state.keys() == fedper_trainer.global_state.keys()
    for key, value in fedper_trainer.global_state.items():
        assert torch.equal(gpfl_trainer.global_state[key], value), key
    for client_id, state in fedper_trainer.client_states.items():
        for key, value in state.items():
            assert torch.equal(gpfl_trainer.client_states[client_id][key], value), key


# ------------------------------------------------------------------------- training
def test_trains_alone_in_a_plain_lightning_trainer():
    data = tiny_data(num_clients=2, partition="pathological")
    data.setup("fit")
    client_data = data.client(0)
    client = make_gpfl()
    initial_table = client.gce.weight.detach().clone()
    trainer = L.Trainer(max_epochs=15, accelerator="cpu", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(client, client_data)
    assert torch.equal(client.C_hat, initial_table)  # frozen at fit start
    shares = client_data.class_counts / client_data.class_counts.sum()
    assert torch.allclose(client.p, shares @ initial_table / NUM_CLASSES, atol=1e-6)
    assert not torch.equal(client.gce.weight.detach(), initial_table)
    accuracy = trainer.validate(client, client_data, verbose=False)[0]["val_accuracy"]
    assert accuracy > 0.75  # two classes on this client


def test_federated_rounds_increase_accuracy(tmp_path):
    # CoV's beta adds a unit-scale constant to every feature, so the head needs small steps:
    # the paper's lr is 0.005; here 0.01 with 5 local epochs so that 5 rounds suffice.
    trainer = tiny_trainer(tmp_path, rounds=5, run_name="run", local_epochs=5, batch_size=8)
    summary = trainer.fit(make_gpfl(lr=0.01), tiny_data())
    with open(tmp_path / "run" / "metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    accuracies = [float(r["personalized_accuracy"]) for r in rows]
    assert accuracies[-1] > accuracies[0] + 0.2
    assert summary["best_personalized_accuracy"] > 0.5  # 4 classes: chance is 0.25
    losses = [float(r["train/loss_p"]) for r in rows]
    assert losses[-1] < losses[0]
    assert "train/loss_alg" in rows[0] and "train/loss_mlg" in rows[0]


def test_bad_constructor_values_are_named():
    with pytest.raises(ValueError, match="unknown cov_init 'ones'; valid: paper, zero"):
        make_gpfl(cov_init="ones")
    with pytest.raises(ValueError, match="lamda.*>= 0, got -1"):
        make_gpfl(lamda=-1)
    with pytest.raises(ValueError, match="mu.*>= 0, got -0.5"):
        make_gpfl(mu=-0.5)


def test_cov_scales_by_gamma_plus_one_and_shifts_by_beta():
    client = make_gpfl()
    dim = client.model.feature_dim
    for sub, value in ((client.cov.gamma, 2.0), (client.cov.beta, -0.5)):
        torch.nn.init.zeros_(sub[2].weight)  # the LayerNorm outputs its bias: a constant
        torch.nn.init.constant_(sub[2].bias, value)
    features = torch.randn(5, dim, generator=torch.Generator().manual_seed(2))
    out = client.cov(features, torch.randn(1, dim))
    torch.testing.assert_close(out[0], F.relu(3.0 * features - 0.5))


def test_zero_cov_init_starts_as_relu_of_the_feature_and_still_learns():
    client = with_context(make_gpfl(cov_init="zero"))
    x, y = batch()
    features = client.model.encoder(x)
    f_g, f_p = client.routes(x)
    assert torch.equal(f_g, F.relu(features)) and torch.equal(f_p, F.relu(features))
    client.training_step((x, y), 0).backward()
    assert client.cov.gamma[2].weight.grad.abs().sum() > 0
    assert client.cov.beta[2].weight.grad.abs().sum() > 0
    paper = make_gpfl()
    assert torch.equal(paper.cov.gamma[2].weight, torch.ones_like(paper.cov.gamma[2].weight))


def test_code_form_of_p_does_not_divide_by_the_class_count():
    paper = with_context(make_gpfl())
    code = with_context(make_gpfl(p_divide_by_classes=False))
    torch.testing.assert_close(code.p, NUM_CLASSES * paper.p)
    torch.testing.assert_close(code.g, paper.g)
