"""MAP, FedRS and FedPHP (fedlight/clients/map.py, fedrs.py, fedphp.py): restricted softmax,
HPM, schedule, resume."""

import csv
import math

import pytest
import torch
import torch.nn.functional as F

from fedlight.clients import CLIENTS, MAP, ClientContext, FedPHP, FedRS
from fedlight.clients.map import (
    hpm_momentum,
    kd_loss,
    kd_loss_code,
    mmd_loss,
)
from fedlight.clients.restricted_softmax import restricted_softmax_scales
from fedlight.core.client import upload_phase
from fedlight.core.messages import TrainTask
from fedlight.core.seeding import derive_seed
from fedlight.data.datamodule import batches_per_epoch, iterate_batches
from tests.conftest import tiny_data, tiny_trainer


def make_client(cls=MAP, **kwargs):
    torch.manual_seed(0)
    return cls(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8), "lr": 0.1,
                  **kwargs})


def give_context(client, counts=(5.0, 3.0, 0.0, 0.0), join_ratio=0.5, rounds=4, train_data=None,
                 batch_size=16, drop_last=False):
    client.context = ClientContext(client_id=0, round=0, rounds=rounds, join_ratio=join_ratio,
                                   class_counts=torch.tensor(counts), train_data=train_data,
                                   batch_size=batch_size, drop_last=drop_last)


def batch(n=12, classes=(0, 1)):
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(n, 1, 8, 8, generator=generator)
    y = torch.tensor([classes[i % len(classes)] for i in range(n)])
    return x, y


def read_metrics(run_dir):
    with open(run_dir / "metrics.csv") as handle:
        return list(csv.DictReader(handle))


# ----------------------------------------------------------------- restricted softmax
def test_rs_scales_hard_soft_and_complete_classes_by_hand():
    counts = torch.tensor([6.0, 3.0, 0.0, 0.0])
    assert restricted_softmax_scales(counts, 0.9).tolist() == pytest.approx([1, 1, 0.9, 0.9])
    assert restricted_softmax_scales(counts, 0.5, "soft").tolist() == pytest.approx(
        [1.0, 0.75, 0.5, 0.5])
    assert restricted_softmax_scales(counts, 0.9, complete_classes=True).tolist() == (
        pytest.approx([2 / 3, 1 / 3, 0, 0]))
    assert restricted_softmax_scales(counts, 0.9, "all").tolist() == pytest.approx([0.9] * 4)
    one = torch.tensor([6.0, 1.0, 0.0, 0.0])  # a single sample makes a class observed
    assert restricted_softmax_scales(one, 0.5).tolist() == pytest.approx([1, 1, 0.5, 0.5])
    single = torch.tensor([1.0, 0.0, 0.0, 0.0])
    assert restricted_softmax_scales(single, 0.5, complete_classes=True).tolist() == [1, 0, 0, 0]
    with pytest.raises(ValueError, match="unknown mode 'medium'; valid: hard, soft, all"):
        restricted_softmax_scales(counts, 0.5, "medium")


def test_rs_with_alpha_one_equals_plain_cross_entropy():
    client = make_client(rs_alpha=1.0)
    give_context(client)
    client.phase = "rs"
    x, y = batch()
    assert torch.equal(client.training_step((x, y), 0), F.cross_entropy(client(x), y))
    restricted = make_client(rs_alpha=0.5)
    give_context(restricted)
    restricted.phase = "rs"
    assert not torch.allclose(restricted.training_step((x, y), 0), F.cross_entropy(client(x), y))


@pytest.mark.parametrize("alpha, zero", [(0.0, True), (0.9, False)])
def test_rs_with_alpha_zero_gives_no_gradient_to_missing_class_rows(alpha, zero):
    client = make_client(rs_alpha=alpha)
    give_context(client, counts=(5.0, 3.0, 0.0, 0.0))
    client.phase = "rs"
    client.training_step(batch(), 0).backward()
    head = client.model.head
    missing = (head.weight.grad[2:].abs().sum() + head.bias.grad[2:].abs().sum()).item()
    assert (missing == 0.0) is zero
    assert head.weight.grad[:2].abs().sum() > 0
    assert all(p.grad.abs().sum() > 0 for p in client.model.encoder.parameters())


# ----------------------------------------------------------------- knowledge transfer
def test_kd_is_zero_for_equal_logits_and_positive_otherwise():
    logits = torch.randn(8, 5, generator=torch.Generator().manual_seed(0))
    assert kd_loss(logits, logits.clone()).abs().item() < 1e-6
    assert kd_loss(logits, logits.flip(0)).item() > 0
    by_hand = 16 * (F.softmax(logits.flip(0) / 4, -1) * (
        F.log_softmax(logits.flip(0) / 4, -1) - F.log_softmax(logits / 4, -1))).sum(-1).mean()
    assert kd_loss(logits, logits.flip(0)).item() == pytest.approx(by_hand.item(), rel=1e-5)


def test_mmd_is_zero_for_identical_batches_and_positive_otherwise():
    features = torch.randn(16, 6, generator=torch.Generator().manual_seed(0))
    assert mmd_loss(features, features.clone()).abs().item() < 1e-6
    assert mmd_loss(features, features + 1.0).item() > 1e-3
    other = torch.randn(16, 6, generator=torch.Generator().manual_seed(1))
    assert mmd_loss(features, other).item() > 0


def test_personalize_phase_uses_the_hpm_only_once_it_exists():
    client = make_client(lamda=0.5)
    give_context(client)
    client.phase = "personalize"
    client.capture_logs(True)
    x, y = batch()
    client.on_round_start(0, {})
    assert torch.equal(client.training_step((x, y), 0), F.cross_entropy(client(x), y))
    assert set(client.pop_federated_logs()) == {"personalize_loss"}
    with torch.no_grad():  # a teacher whose softmax and features differ from the student's
        client.hpm.head.bias.add_(2.0 * torch.arange(4.0))
        client.hpm.encoder.fc[0].weight.mul_(2.0)
    client.hpm_updates.fill_(1)
    client.on_round_start(1, {})
    logits = client(x)
    kd = kd_loss(logits, client.hpm(x))
    assert kd > 0.1
    expected = 0.5 * F.cross_entropy(logits, y) + 0.5 * kd
    assert torch.allclose(client.training_step((x, y), 0), expected)
    assert set(client.pop_federated_logs()) == {"personalize_loss", "kt_loss"}
    mmd = make_client(kt="mmd", lamda=0.5)
    give_context(mmd)
    mmd.phase = "personalize"
    with torch.no_grad():
        mmd.hpm.encoder.fc[0].weight.mul_(2.0)
    mmd.hpm_updates.fill_(1)
    mmd.on_round_start(1, {})
    features = mmd.model.encoder(x)
    transfer = mmd_loss(features, mmd.hpm.encoder(x))
    assert transfer > 0.01
    expected = 0.5 * F.cross_entropy(mmd(x), y) + 0.5 * transfer
    assert torch.allclose(mmd.training_step((x, y), 0), expected)
    tau = make_client(lamda=0.5, tau=2.0)  # the temperature reaches the KD term
    give_context(tau)
    tau.phase = "personalize"
    tau.load_state_dict(client.state_dict())
    tau.on_round_start(1, {})
    expected = 0.5 * F.cross_entropy(logits, y) + 0.5 * kd_loss(logits, client.hpm(x), 2.0)
    assert torch.allclose(tau.training_step((x, y), 0), expected)


# ----------------------------------------------------------------- schedule and upload
def plan(client, epochs):
    return [(p.name, p.epochs, p.upload_after, p.lr_scale, p.max_steps)
            for p in client.local_phases(epochs)]


def test_paper_schedule_splits_the_epochs():
    client = make_client(schedule="paper")
    assert plan(client, 1) == [("rs", 1, True, 1.0, None)]
    assert plan(client, 2) == [("rs", 1, True, 1.0, None), ("personalize", 1, False, 1.0, None)]
    assert plan(client, 5) == [("rs", 3, True, 1.0, None), ("personalize", 2, False, 1.0, None)]
    custom = make_client(schedule="paper", rs_epochs=2, personalize_epochs=1,
                         personalize_lr_scale=0.2)
    assert plan(custom, 2) == [("rs", 2, True, 1.0, None), ("personalize", 1, False, 0.2, None)]


def test_code_schedule_uploads_after_all_epochs_then_personalizes_briefly():
    client = make_client()  # the default
    assert client.schedule == "code"
    give_context(client, counts=(20.0, 20.0, 0.0, 0.0), batch_size=16)  # 40 samples: 3 steps
    assert plan(client, 6) == [("rs", 6, True, 1.0, None),
                               ("personalize", 2, False, 0.2, 5)]  # max(ceil(1.8), 5) steps
    give_context(client, counts=(400.0, 1.0, 0.0, 0.0), batch_size=16)  # 401: 25 steps
    assert plan(client, 6) == [("rs", 6, True, 1.0, None),
                               ("personalize", 1, False, 0.2, 15)]  # ceil(0.1 * 150)
    # trainer.drop_last: 410 samples give 25 steps an epoch, not 26
    give_context(client, counts=(400.0, 10.0, 0.0, 0.0), batch_size=16, drop_last=True)
    assert plan(client, 6) == [("rs", 6, True, 1.0, None),
                               ("personalize", 1, False, 0.2, 15)]  # ceil(0.1 * 150)
    give_context(client, counts=(400.0, 10.0, 0.0, 0.0), batch_size=16)
    assert plan(client, 6) == [("rs", 6, True, 1.0, None),
                               ("personalize", 1, False, 0.2, 15)]  # the code's int(0.1 * 156)
    fixed = make_client(personalize_epochs=0)
    assert plan(fixed, 3) == [("rs", 3, True, 1.0, None)]
    assert batches_per_epoch(33, 16) == 2 and batches_per_epoch(34, 16) == 3
    assert batches_per_epoch(1, 16) == 1


def test_code_schedule_personalizes_for_the_codes_floor_of_a_tenth_of_the_steps():
    client = make_client()
    for samples, steps in ((16 * 55, 5), (16 * 59, 5), (16 * 69, 6), (16 * 70, 7)):
        give_context(client, counts=(float(samples), 0.0, 0.0, 0.0), batch_size=16)
        assert plan(client, 1)[-1][-1] == steps  # max(int(0.1 * S), 5), never rounded up


def test_rs_epochs_zero_trains_and_uploads_the_distilled_model_as_the_original_fedphp():
    client = make_client(FedPHP, rs_epochs=0, personalize_epochs=3, personalize_lr_scale=1.0)
    give_context(client)
    assert plan(client, 3) == [("personalize", 3, False, 1.0, None)]
    assert upload_phase(client.local_phases(3)) == 0  # no phase asks: after the last one


def test_lr_warmup_scales_every_phase_until_round_w():
    client = make_client(lr_warmup_rounds=5)
    give_context(client, counts=(20.0, 20.0, 0.0, 0.0), batch_size=16)
    for round_idx, factor in ((0, 0.2), (1, 0.4), (3, 0.8), (4, 1.0), (9, 1.0)):
        client.on_round_start(round_idx, {})
        scales = [p.lr_scale for p in client.local_phases(2)]
        assert scales == pytest.approx([factor, 0.2 * factor])
    plain = make_client()
    give_context(plain, counts=(20.0, 20.0, 0.0, 0.0), batch_size=16)
    plain.on_round_start(0, {})
    assert [p.lr_scale for p in plain.local_phases(2)] == [1.0, 0.2]


def test_kd_code_form_softens_the_teacher_only_without_tau_squared():
    student = torch.randn(6, 5, generator=torch.Generator().manual_seed(4))
    teacher = 3 * torch.randn(6, 5, generator=torch.Generator().manual_seed(5))
    by_hand = -(F.softmax(teacher / 4, -1) * F.log_softmax(student, -1)).sum(-1).mean()
    assert kd_loss_code(student, teacher).item() == pytest.approx(by_hand.item(), rel=1e-6)
    assert kd_loss_code(student, teacher).item() != pytest.approx(
        kd_loss(student, teacher).item(), rel=1e-2)
    client = make_client(lamda=0.5, kd_form="code")
    give_context(client)
    client.phase = "personalize"
    with torch.no_grad():
        client.hpm.head.bias.add_(2.0 * torch.arange(4.0))
    client.hpm_updates.fill_(1)
    client.on_round_start(1, {})
    x, y = batch()
    logits = client(x)
    expected = 0.5 * F.cross_entropy(logits, y) + 0.5 * kd_loss_code(logits, client.hpm(x))
    assert torch.allclose(client.training_step((x, y), 0), expected)


def test_hpm_init_initial_teaches_from_the_first_participation():
    client = make_client(lamda=0.5, hpm_init="initial")
    give_context(client)
    client.phase = "personalize"
    with torch.no_grad():  # the model moved away from the initial weights the HPM holds
        client.model.head.bias.add_(2.0 * torch.arange(4.0))
    client.on_round_start(0, {})
    assert int(client.hpm_updates) == 0
    x, y = batch()
    logits = client(x)
    expected = 0.5 * F.cross_entropy(logits, y) + 0.5 * kd_loss(logits, client.hpm(x))
    assert torch.allclose(client.training_step((x, y), 0), expected)
    assert not torch.allclose(expected, F.cross_entropy(logits, y))
    client.on_round_end()  # the first update still copies the personalized model (mu_k = 0)
    assert torch.equal(client.hpm.head.bias, client.model.head.bias)


def test_upload_is_the_phase_one_model_and_the_hpm_the_personalized_one(tmp_path):
    data = tiny_data(partition="pathological")  # 2 of 4 classes per client: RS matters
    trainer = tiny_trainer(tmp_path, local_epochs=2, batch_size=16)
    trainer._build(make_client(schedule="paper"), data, None, None, reinit=True)
    shared, message = trainer.server.download(1)
    upload = next(iter(trainer.engine.train([TrainTask(1, 0, shared, message)]))).upload

    reference = make_client(schedule="paper")
    x, y = data.client_train(1)
    scales = restricted_softmax_scales(data.class_counts(1), 0.9)
    assert scales.min() < 1  # client 1 misses classes
    seed = derive_seed(0, 0, 1)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    for rs_phase in (True, False):
        optimizer = torch.optim.SGD(reference.model.parameters(), lr=0.1)
        for xb, yb in iterate_batches(x, y, 16, generator):
            logits = reference.model(xb)
            loss = F.cross_entropy(logits * scales if rs_phase else logits, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if rs_phase:
            for key, value in reference.shared_state().items():
                assert torch.equal(upload.state[key], value), key
    assert not any(k.startswith("hpm") for k in upload.state)
    stored = trainer.client_states[1]
    for key, value in reference.model.state_dict().items():
        assert torch.equal(stored[f"hpm.{key}"], value), key  # first HPM = personalized model
    assert not torch.equal(stored["hpm.head.weight"], upload.state["model.head.weight"])
    assert int(stored["hpm_updates"]) == 1


# ----------------------------------------------------------------- the HPM
def test_hpm_update_and_momentum_match_hand_computed_values_over_three_participations():
    client = make_client()
    give_context(client, join_ratio=0.5, rounds=4)  # Q * T = 2 expected selections
    expected_hpm, expected_mu = [1.0, 0.45 * 1.0 + 0.55 * 2.0, None], [0.0, 0.45, 0.9]
    expected_hpm[2] = 0.9 * expected_hpm[1] + 0.1 * 4.0
    for z, value in enumerate((1.0, 2.0, 4.0)):
        assert client.hpm_mu(z) == pytest.approx(expected_mu[z])
        with torch.no_grad():
            for p in client.model.parameters():
                p.fill_(value)
        client.on_round_start(z, {})
        client.on_round_end()
        assert int(client.hpm_updates) == z + 1
        for p in client.hpm.parameters():
            assert torch.allclose(p, torch.full_like(p, expected_hpm[z])), z
    assert hpm_momentum(5, 0.5, 4) == 1.0  # clipped to [0, 1]
    assert hpm_momentum(1, 0.5, 4) == pytest.approx(0.45)  # the default macro momentum 0.9
    assert hpm_momentum(5, 0.5, 4, cap=0.9) == 0.9  # the released code's cap
    capped = make_client(mu_cap=0.9)
    give_context(capped, join_ratio=0.5, rounds=4)
    assert capped.hpm_mu(1) == pytest.approx(0.45) and capped.hpm_mu(3) == pytest.approx(0.9)
    assert hpm_momentum(1, 0.2, 30, mu=0.9) == pytest.approx(0.15)


def test_hpm_batchnorm_statistics_are_reestimated_on_the_training_data():
    torch.manual_seed(0)
    client = MAP(backbone="cnn_bn", num_classes=4, input_shape=(1, 16, 16))
    x = torch.randn(20, 1, 16, 16)
    y = torch.arange(20) % 4
    give_context(client, counts=(5.0, 5.0, 5.0, 5.0), train_data=(x, y), batch_size=32)
    client.on_round_end()
    conv, norm = client.hpm.encoder.features[0], client.hpm.encoder.features[1]
    with torch.no_grad():
        out = conv(x)
    assert torch.allclose(norm.running_mean, out.mean((0, 2, 3)), atol=1e-5)
    assert torch.allclose(norm.running_var, out.var((0, 2, 3), unbiased=True), atol=1e-4)
    assert not client.hpm.training and norm.momentum == 0.1


def test_federated_run_logs_hpm_accuracy_and_counts_participations(tmp_path):
    trainer = tiny_trainer(tmp_path, rounds=3, join_ratio=0.5, local_epochs=2, run_name="m")
    summary = trainer.fit(make_client(kt="mmd"), tiny_data(partition="pathological"))
    rows = read_metrics(tmp_path / "m")
    assert {"hpm_accuracy", "global_accuracy", "train/kt_loss", "train/rs_loss",
            "train/personalize_loss"} <= set(rows[0])
    assert summary["last_global_accuracy"] is not None
    # participants differ every round: the mean of the last rounds sits beside the best one
    personalized = [float(r["personalized_accuracy"]) for r in rows]
    assert summary["mean_last_personalized_accuracy"] == pytest.approx(
        sum(personalized) / len(personalized))
    assert summary["best_personalized_accuracy"] == pytest.approx(max(personalized))
    for client_id, state in trainer.client_states.items():
        assert int(state["hpm_updates"]) == trainer.participations[client_id]


def test_hpm_state_survives_checkpoint_and_resume(tmp_path):
    # mu_k depends on T = trainer.rounds, so the interrupted run is a 4-round run that crashes
    # in round 3 (after the round-2 checkpoint), then is resumed to 4 rounds.
    def trainer(name):
        return tiny_trainer(tmp_path, rounds=4, join_ratio=0.5, local_epochs=2, run_name=name,
                            checkpoint_every=1)

    full = trainer("full")
    full.fit(make_client(), tiny_data(partition="pathological"))
    crashing = make_client()

    def crash(round_idx, message):
        if round_idx == 2:
            raise RuntimeError("simulated crash")
        MAP.on_round_start(crashing, round_idx, message)

    crashing.on_round_start = crash
    with pytest.raises(RuntimeError, match="simulated crash"):
        trainer("resumed").fit(crashing, tiny_data(partition="pathological"))
    assert len(read_metrics(tmp_path / "resumed")) == 2
    resumed = trainer("resumed")
    resumed.fit(make_client(), tiny_data(partition="pathological"), ckpt_path="last")

    full_rows, resumed_rows = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "resumed")
    assert len(full_rows) == 4 and "hpm_accuracy" in full_rows[0]
    assert full_rows == [{**r, "seconds": f["seconds"]}
                         for r, f in zip(resumed_rows, full_rows, strict=True)]
    assert set(full.client_states) == set(resumed.client_states)
    for client_id, state in full.client_states.items():
        assert any(k.startswith("hpm.") for k in state)
        for key, value in state.items():
            assert torch.equal(resumed.client_states[client_id][key], value), (client_id, key)
    for key, value in full.global_state.items():
        assert torch.equal(resumed.global_state[key], value), key


# ----------------------------------------------------------------- variants and bad input
def test_fedrs_and_fedphp_are_map_with_other_defaults():
    assert CLIENTS["FedRS"] is FedRS and CLIENTS["FedPHP"] is FedPHP
    fedrs, fedphp = make_client(FedRS), make_client(FedPHP)
    assert isinstance(fedrs, MAP) and isinstance(fedphp, MAP)
    assert fedrs.kt == "none" and fedrs.hpm is None and fedrs.partition.private == ()
    assert fedrs.has_global_model and set(fedrs.eval_outputs(batch()[0])) == {"personalized"}
    assert fedphp.rs_alpha == 1.0 and fedphp.kt == "kd" and fedphp.hpm is not None
    assert set(fedphp.eval_outputs(batch()[0])) == {"personalized", "hpm"}
    assert all(not p.requires_grad for p in fedphp.hpm.parameters())
    fedphp.train()
    assert fedphp.model.training and not fedphp.hpm.training
    assert fedphp.has_global_model
    assert not make_client(extra_private=["model.head.*"]).has_global_model


@pytest.mark.parametrize("kwargs, message", [
    ({"rs_alpha": 1.5}, r"rs_alpha must be in \[0, 1\], got 1.5"),
    ({"lamda": -0.1}, r"lamda must be in \[0, 1\], got -0.1"),
    ({"rs_mode": "medium"}, "unknown rs_mode 'medium'; valid: hard, soft, all"),
    ({"kt": "l2"}, "unknown kt 'l2'; valid: kd, mmd, none"),
    ({"tau": 0.0}, "tau .* must be positive, got 0.0"),
    ({"mu": -1.0}, "mu .* must be >= 0, got -1.0"),
    ({"rs_epochs": -1}, "rs_epochs must be >= 0"),
    ({"rs_epochs": 0}, "rs_epochs: 0 needs personalize_epochs >= 1"),
    ({"kd_form": "soft"}, "unknown kd_form 'soft'; valid: paper, code"),
    ({"hpm_init": "random"}, "unknown hpm_init 'random'; valid: none, initial"),
    ({"lr_warmup_rounds": -1}, "lr_warmup_rounds must be >= 0, got -1"),
    ({"personalize_epochs": -1}, "personalize_epochs must be >= 0"),
    ({"personalize_lr_scale": 0.0}, "personalize_lr_scale must be positive, got 0.0"),
    ({"schedule": "fast"}, "unknown schedule 'fast'; valid: code, paper"),
    ({"mu_cap": 0.0}, r"mu_cap must be in \(0, 1\], got 0.0"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_client(**kwargs)


def test_mmd_bandwidth_follows_the_pooled_batch():
    # Scaling both batches scales every distance and b alike: the loss is scale-invariant.
    x = torch.randn(10, 4, generator=torch.Generator().manual_seed(2))
    y = torch.randn(10, 4, generator=torch.Generator().manual_seed(3))
    assert math.isclose(mmd_loss(x, y).item(), mmd_loss(10 * x, 10 * y).item(), rel_tol=1e-4)
    assert math.isclose(mmd_loss(x, y).item(), mmd_loss(x / 100, y / 100).item(), rel_tol=1e-4)


# ----------------------------------------------------------------- mutation killers
def test_kd_direction_is_teacher_to_student_for_an_asymmetric_pair():
    student = torch.randn(6, 5, generator=torch.Generator().manual_seed(4))
    teacher = 3 * torch.randn(6, 5, generator=torch.Generator().manual_seed(5))
    p_t, p_s = F.softmax(teacher / 4, -1), F.softmax(student / 4, -1)
    forward = 16 * (p_t * (p_t.log() - p_s.log())).sum(-1).mean()  # KL(teacher || student)
    reverse = 16 * (p_s * (p_s.log() - p_t.log())).sum(-1).mean()
    assert abs(forward - reverse) > 1e-2  # the pair tells the two directions apart
    assert kd_loss(student, teacher).item() == pytest.approx(forward.item(), rel=1e-5)


def test_mmd_sums_five_gaussian_kernels_by_hand():
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(6))
    y = torch.randn(4, 3, generator=torch.Generator().manual_seed(7)) + 0.5
    pooled = torch.cat([x, y])
    squared = ((pooled[:, None] - pooled[None]) ** 2).sum(-1)
    b = squared.sum() / (9 * 9 - 9)

    def kernel(u, v):
        return sum(math.exp(-float(((u - v) ** 2).sum()) / (b * s))
                   for s in (0.25, 0.5, 1.0, 2.0, 4.0))

    def mean_kernel(a, c):
        return sum(kernel(u, v) for u in a for v in c) / (len(a) * len(c))

    expected = mean_kernel(x, x) + mean_kernel(y, y) - 2 * mean_kernel(x, y)
    assert mmd_loss(x, y).item() == pytest.approx(expected, rel=1e-4)


def test_personalized_score_is_the_trained_model_not_the_hpm():
    client = make_client()
    with torch.no_grad():
        client.hpm.head.bias.add_(5.0 * torch.arange(4.0))  # an HPM that predicts otherwise
    x, _ = batch()
    outputs = client.eval_outputs(x)
    assert torch.equal(outputs["personalized"], client.model(x))
    assert torch.equal(outputs["hpm"], client.hpm(x))
    assert not torch.allclose(outputs["personalized"], outputs["hpm"])
