"""FedPick: the binary straight-through mask, noise only in training, the loss terms, what
stays on the client, the ablation switches and the feature analyses."""

import csv
import math

import pytest
import torch
import torch.nn.functional as F

from fedlight.clients import FedPick
from fedlight.clients.fedbn import BATCH_NORMS
from fedlight.clients.fedpick import (
    feature_sparsity_ratio,
    fisher_scores,
    negative_entropy,
    symmetric_kl,
)
from tests.conftest import tiny_data, tiny_trainer

SHAPE = (1, 16, 16)  # smallest input the cnn_bn backbone takes


def make(**kwargs) -> FedPick:
    torch.manual_seed(0)
    options = {"backbone": "cnn_bn", "num_classes": 4, "input_shape": SHAPE, **kwargs}
    return FedPick(**options)


def batch(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(n, *SHAPE, generator=generator), torch.randint(0, 4, (n,),
                                                                       generator=generator)


def data(**kwargs):
    return tiny_data(num_clients=3, shape=SHAPE, **kwargs)


# ------------------------------------------------------------------------- the mask
def test_mask_is_exactly_binary_forward_and_the_mask_network_gets_gradient():
    client = make()
    client.train()
    x, y = batch()
    out = client.outputs(x)
    assert out.mask is not None and out.soft_mask is not None
    assert set(out.mask.unique().tolist()) <= {0.0, 1.0}
    assert 0 < out.mask.mean() < 1  # some features kept, some dropped
    assert not set(out.soft_mask.unique().tolist()) <= {0.0, 1.0}
    client.training_step((x, y), 0).backward()
    for param in client.pfsm.mask_net.parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0


def test_straight_through_gradient_is_the_soft_mask_gradient():
    client = make()
    client.train()
    z = torch.rand(8, client.model.feature_dim)
    client.noise.reseed(3)
    _, soft, mask = client.select(z)
    weights = torch.randn_like(mask)
    (mask * weights).sum().backward()
    grad_hard = client.pfsm.mask_net[2].bias.grad.clone()
    client.zero_grad()
    client.noise.reseed(3)
    _, soft, _ = client.select(z)
    (soft * weights).sum().backward()
    assert torch.allclose(grad_hard, client.pfsm.mask_net[2].bias.grad)


def test_no_noise_at_inference_and_the_mask_is_l_nonnegative():
    client = make()
    x, _ = batch()
    client.eval()
    first, second = client(x), client(x)
    assert torch.equal(first, second)
    out = client.outputs(x)
    assert torch.equal(out.mask, (out.mask_logits >= 0).float())
    client.train()
    torch.manual_seed(0)
    a = client.outputs(x).mask
    b = client.outputs(x).mask
    assert not torch.equal(a, b)  # Gumbel noise in training


def test_relevant_and_irrelevant_features_add_up_to_the_global_feature():
    client = make()
    client.train()
    out = client.outputs(batch()[0])
    assert torch.equal(out.z_p + out.z_u, out.z_g)
    assert torch.equal(out.z_p * out.z_u, torch.zeros_like(out.z_g))
    soft = make(hard_mask=False)
    soft.train()
    out = soft.outputs(batch()[0])
    assert torch.allclose(out.z_p + out.z_u, out.z_g, atol=1e-6)
    assert torch.equal(out.mask, out.soft_mask)


# ------------------------------------------------------------------------- loss terms
def test_negative_entropy_is_minimal_for_a_uniform_prediction():
    uniform = torch.zeros(3, 5, requires_grad=True)
    value = negative_entropy(uniform)
    assert value.item() == pytest.approx(-math.log(5))
    value.backward()
    assert torch.allclose(uniform.grad, torch.zeros(3, 5))
    for seed in range(5):
        logits = torch.randn(3, 5, generator=torch.Generator().manual_seed(seed))
        assert negative_entropy(logits) > value
    confident = torch.tensor([[20.0, 0, 0, 0, 0]])
    assert negative_entropy(confident).item() == pytest.approx(0.0, abs=1e-6)


def test_symmetric_kl_is_symmetric_zero_for_identical_and_matches_hand_computation():
    a = torch.tensor([[1.0, 0.0, -1.0]])
    b = torch.tensor([[0.0, 2.0, 0.0]])
    assert symmetric_kl(a, b).item() == pytest.approx(symmetric_kl(b, a).item())
    assert symmetric_kl(a, a).item() == 0.0
    p, q = a.softmax(-1), b.softmax(-1)
    expected = (p * (p / q).log()).sum() + (q * (q / p).log()).sum()
    assert symmetric_kl(a, b).item() == pytest.approx(expected.item(), rel=1e-5)
    # both directions match torch's KL: KL(p || q) = kl_div(log q, log p)
    reference = (F.kl_div(b.log_softmax(-1), a.log_softmax(-1), log_target=True,
                          reduction="batchmean")
                 + F.kl_div(a.log_softmax(-1), b.log_softmax(-1), log_target=True,
                            reduction="batchmean"))
    assert symmetric_kl(a, b).item() == pytest.approx(reference.item(), rel=1e-5)


def test_training_loss_is_the_weighted_sum_of_the_four_terms():
    client = make(lambda_lce=2.0, lambda_ent=0.5, lambda_dis=3.0)
    client.capture_logs(True)  # as under fedlight's orchestrator
    client.train()
    x, y = batch()
    client.noise.reseed(7)
    loss = client.training_step((x, y), 0)
    logs = {k: v.item() for k, v in client.pop_federated_logs().items()}
    client.noise.reseed(7)  # same Gumbel noise
    out = client.outputs(x)
    expected = (F.cross_entropy(out.logits_g, y) + 2.0 * F.cross_entropy(out.logits_p, y)
                + 0.5 * negative_entropy(out.logits_u)
                + 3.0 * symmetric_kl(out.logits_p, out.logits_g))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert set(logs) == {"loss_gce", "loss_lce", "loss_ent", "loss_dis", "keep_ratio",
                         "keep_ratio_clean", "mask_logit_abs", "train_loss"}
    assert logs["keep_ratio"] == pytest.approx(out.mask.mean().item())
    clean = (out.mask_logits >= 0).float().mean().item()
    assert logs["keep_ratio_clean"] == pytest.approx(clean)
    assert logs["mask_logit_abs"] == pytest.approx(out.mask_logits.abs().mean().item())


def test_prediction_is_the_sum_of_global_and_personalized_logits():
    client = make()
    client.eval()
    x, _ = batch()
    out = client.outputs(x)
    scores = client.eval_outputs(x)
    assert torch.equal(scores["personalized"], out.logits_g + out.logits_p)
    assert torch.equal(scores["global_head"], out.logits_g)
    assert torch.equal(scores["personalized_head"], out.logits_p)


# ------------------------------------------------------------------------- what is shared
def test_batchnorm_and_pfsm_never_leave_the_client_the_rest_does():
    client = make()
    bn_keys = set(client.state_keys_of_type(BATCH_NORMS))
    assert {k for k in bn_keys if "running_mean" in k}
    pfsm_keys = {k for k in client.state_dict() if k.startswith("pfsm.")}
    uploaded = set(client.upload().state)
    assert not uploaded & (bn_keys | pfsm_keys)
    assert uploaded == set(client.state_dict()) - bn_keys - pfsm_keys
    assert "model.encoder.features.0.weight" in uploaded and "model.head.weight" in uploaded
    assert set(client.client_state()) == bn_keys | pfsm_keys


def test_sharing_switches_move_batchnorm_and_pfsm_to_the_server():
    bn_keys = set(make().state_keys_of_type(BATCH_NORMS))
    shared_bn = make(private_bn=False)
    assert bn_keys <= set(shared_bn.upload().state)
    assert all(k.startswith("pfsm.") for k in shared_bn.partition.private)
    shared_pfsm = make(private_pfsm=False)
    assert "pfsm.mask_net.0.weight" in shared_pfsm.upload().state
    assert set(shared_pfsm.partition.private) == bn_keys
    everything = make(private_bn=False, private_pfsm=False)
    assert everything.partition.private == () and everything.has_global_model
    assert not make().has_global_model


# ------------------------------------------------------------------------- ablations
def test_without_pfsm_is_fedbn():
    client = make(pfsm=False)
    assert client.pfsm is None
    assert not any(k.startswith("pfsm.") for k in client.state_dict())
    assert set(client.partition.private) == set(client.state_keys_of_type(BATCH_NORMS))
    client.train()
    x, y = batch()
    loss = client.training_step((x, y), 0)
    assert loss.item() == pytest.approx(F.cross_entropy(client.model(x), y).item(), rel=1e-5)
    client.eval()
    assert torch.equal(client(x), client.model(x))
    assert set(client.eval_outputs(x)) == {"personalized", "global_head"}


def test_zero_weights_drop_their_terms():
    client = make(lambda_lce=0, lambda_ent=0, lambda_dis=0)
    client.capture_logs(True)  # as under fedlight's orchestrator
    client.train()
    x, y = batch()
    torch.manual_seed(0)
    loss = client.training_step((x, y), 0)
    assert set(client.pop_federated_logs()) == {"loss_gce", "keep_ratio", "keep_ratio_clean",
                                                "mask_logit_abs", "train_loss"}
    assert loss.item() == pytest.approx(F.cross_entropy(client.model(x), y).item(), rel=1e-5)


def test_without_ensemble_predicts_with_one_head():
    x, _ = batch()
    for solo_head, field in (("global", "logits_g"), ("personalized", "logits_p")):
        client = make(ensemble=False, solo_head=solo_head)
        client.eval()
        assert torch.equal(client(x), getattr(client.outputs(x), field))


def test_soft_mask_is_not_binary_and_keeps_the_gradient():
    client = make(hard_mask=False)
    client.train()
    x, y = batch()
    out = client.outputs(x)
    assert ((out.mask > 0) & (out.mask < 1)).any()
    client.training_step((x, y), 0).backward()
    assert client.pfsm.mask_net[0].weight.grad.abs().sum() > 0


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="tau .* > 0, got 0"):
        make(tau=0)
    with pytest.raises(ValueError, match="lambda_dis must be >= 0, got -1"):
        make(lambda_dis=-1)
    with pytest.raises(ValueError, match="solo_head 'both'; valid: global, personalized"):
        make(solo_head="both")
    with pytest.raises(ValueError, match="mask_lr_scale must be > 0, got 0"):
        make(mask_lr_scale=0)
    with pytest.raises(ValueError, match=r"keep_budget must be in \[0, 1\].*got 1.5"):
        make(keep_budget=1.5)
    with pytest.raises(ValueError, match="lambda_budget=1.0 needs keep_budget"):
        make(lambda_budget=1.0)


# ------------------------------------------------------------------------- training
def test_federated_training_keeps_private_state_apart_and_lowers_the_loss(tmp_path):
    # the Office / DomainNet weights (1, 1, 1): the Digits-Five ones (10, 10, 10) make the
    # first rounds of this 60-sample toy problem overshoot before they settle
    client = make(tau=1.0, lambda_lce=1.0, lambda_dis=1.0)
    private = set(client.partition.private)
    trainer = tiny_trainer(tmp_path, rounds=5, batch_size=16, run_name="fp")
    summary = trainer.fit(client, data())
    assert set(trainer.global_state) == set(client.partition.shared)
    assert not set(trainer.global_state) & private
    states = trainer.client_states
    assert all(set(state) == private for state in states.values())
    mean_key = next(k for k in sorted(private) if k.endswith("running_mean"))
    assert not torch.equal(states[0][mean_key], states[1][mean_key])
    assert not torch.equal(states[0]["pfsm.mask_net.0.weight"],
                           states[1]["pfsm.mask_net.0.weight"])
    with open(tmp_path / "fp" / "metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert float(rows[-1]["train_loss"]) < float(rows[0]["train_loss"])
    for column in ("train/loss_gce", "train/loss_lce", "train/loss_ent", "train/loss_dis",
                   "train/keep_ratio", "global_head_accuracy", "personalized_head_accuracy"):
        assert column in rows[0], column
    assert summary["last_personalized_accuracy"] > 0.4  # 4 classes: chance is 0.25
    assert summary["best_global_accuracy"] is None  # BatchNorm and PFSM are private


# ------------------------------------------------------------------------- analyses
def test_feature_sparsity_ratio_by_hand():
    features = torch.tensor([[3.0, 4.0, 0.0, 1e-9], [0.0, 0.0, 0.0, 2.0]])
    # normalized rows: [0.6, 0.8, 0, 2e-10] -> 2 of 4 small; [0, 0, 0, 1] -> 3 of 4 small
    assert feature_sparsity_ratio(features) == pytest.approx(5 / 8)
    assert feature_sparsity_ratio(-features) == pytest.approx(5 / 8)
    assert feature_sparsity_ratio(torch.ones(2, 4)) == 0.0


def test_fisher_scores_by_hand():
    z = torch.tensor([[0.0, 1.0, 5.0], [2.0, 1.0, 5.0], [10.0, 3.0, 5.0], [12.0, 3.0, 5.0]])
    y = torch.tensor([0, 0, 1, 1])
    # component 0: class means 1, 11, overall 6 -> S_b = 2*25 + 2*25 = 100; S_w = 2*1 + 2*1 = 4
    # component 1: constant within classes -> inf; component 2: constant everywhere -> 0
    scores = fisher_scores(z, y)
    assert scores[0].item() == pytest.approx(25.0)
    assert math.isinf(scores[1].item()) and scores[2].item() == 0.0


def test_keep_ratio_is_the_share_of_nonnegative_mask_logits():
    client = make()
    x, _ = batch(32)
    ratio = client.keep_ratio(x, batch_size=10)
    client.eval()
    with torch.no_grad():
        expected = (client.outputs(x).mask_logits >= 0).float().mean().item()
    assert ratio == pytest.approx(expected)
    assert make(pfsm=False).keep_ratio(x) == 1.0


# ------------------------------------------------------------------------- mutation killers
def test_relevant_features_are_the_kept_ones_and_feed_the_personalized_head():
    client = make()
    client.eval()
    out = client.outputs(batch()[0])
    keep = (out.mask_logits >= 0).float()
    assert 0 < keep.mean() < 1
    assert torch.equal(out.z_p, out.z_g * keep) and torch.equal(out.z_u, out.z_g * (1 - keep))
    assert torch.equal(out.logits_p, client.pfsm.relevant_head(out.z_p))
    assert torch.equal(out.logits_u, client.pfsm.irrelevant_head(out.z_u))


def test_soft_mask_divides_the_logits_by_the_temperature():
    client = make(tau=4.0)
    client.eval()
    out = client.outputs(batch()[0])
    torch.testing.assert_close(out.soft_mask, torch.sigmoid(out.mask_logits / 4.0))


def test_training_noise_is_a_difference_of_two_gumbels():
    # G' - G'' is standard logistic: mean 0, variance pi^2 / 3; recovered from the soft mask.
    client = make(tau=1.0, hard_mask=False)
    client.train()
    z = torch.rand(4096, client.model.feature_dim) * 0.1
    client.noise.reseed(2)
    logits, soft, _ = client.select(z)
    noise = torch.logit(soft.double()) - logits.double()
    assert noise.mean().item() == pytest.approx(0.0, abs=0.02)
    assert noise.var().item() == pytest.approx(math.pi ** 2 / 3, rel=0.03)


def test_distillation_trains_both_heads():
    a = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), requires_grad=True)
    b = torch.randn(4, 3, generator=torch.Generator().manual_seed(1), requires_grad=True)
    symmetric_kl(a, b).backward()
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    log_a, log_b = a2.log_softmax(-1), b2.log_softmax(-1)
    reference = (F.kl_div(log_b, log_a, log_target=True, reduction="batchmean")
                 + F.kl_div(log_a, log_b, log_target=True, reduction="batchmean"))
    reference.backward()
    torch.testing.assert_close(a.grad, a2.grad)
    torch.testing.assert_close(b.grad, b2.grad)
    assert b.grad.abs().sum() > 0

    def head_grad(lambda_dis):
        client = make(lambda_lce=0, lambda_ent=0, lambda_dis=lambda_dis)
        client.train()
        client.noise.reseed(5)
        client.training_step(batch(), 0).backward()
        return client.model.head.weight.grad.clone()

    assert not torch.allclose(head_grad(0.0), head_grad(10.0))  # L_dis reaches h_g


# ------------------------------------------------------------------------- selection knobs
def test_mask_network_gets_its_own_learning_rate():
    client = make(lr=0.01, mask_lr_scale=50.0)
    groups = client.configure_optimizers().param_groups
    mask = {id(p) for p in client.pfsm.mask_net.parameters()}
    assert [g["lr"] for g in groups] == [0.01, pytest.approx(0.5)]
    assert {id(p) for p in groups[1]["params"]} == mask
    assert len(groups[0]["params"]) + len(mask) == len(list(client.parameters()))
    assert len(make().configure_optimizers().param_groups) == 1


def test_initial_mask_bias_shifts_every_logit():
    x, _ = batch()
    plain, biased = make(), make(mask_init_bias=5.0)
    assert torch.equal(biased.pfsm.mask_net[2].bias, torch.full_like(biased.pfsm.mask_net[2].bias,
                                                                     5.0))
    plain.eval()
    biased.eval()
    assert biased.keep_ratio(x) > plain.keep_ratio(x)


def test_keep_budget_term_pulls_the_soft_mask_mean_to_the_target():
    options = dict(lambda_lce=1.0, lambda_ent=0.0, lambda_dis=1.0)
    without, budget = make(**options), make(**options, keep_budget=0.2, lambda_budget=3.0)
    x, y = batch()
    losses = []
    for client in (without, budget):
        client.capture_logs(True)
        client.train()
        client.noise.reseed(4)
        losses.append(client.training_step((x, y), 0))
    budget.noise.reseed(4)
    soft = budget.outputs(x).soft_mask
    assert "loss_budget" in budget.pop_federated_logs()
    expected = 3.0 * (soft.mean() - 0.2) ** 2
    assert (losses[1] - losses[0]).item() == pytest.approx(expected.item(), rel=1e-4)
    target_only = make(**options, keep_budget=0.2)  # no weight: no term
    target_only.capture_logs(True)
    target_only.train()
    target_only.training_step((x, y), 0)
    assert "loss_budget" not in target_only.pop_federated_logs()
