"""fedlight.privacy: the DLG attack and PSNR, client-level DP and their trainer options."""

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from fedlight.clients import FedAvg
from fedlight.data.partitions.dirichlet import Dirichlet
from fedlight.privacy import (
    DLGProbe,
    client_leakage,
    dlg_attack,
    evaluate_client_leakage,
    psnr,
)
from fedlight.server.dp import ClientLevelDP, DPFedAvg, noise_generator, update_norm
from tests.conftest import tiny_data, tiny_trainer

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.fixture(autouse=True)
def one_thread():
    """Double backward through small convolutions is ~50x slower with 2 OpenMP threads than
    with 1 on a loaded machine; these tests are tiny, so run them on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_client(**kwargs):
    torch.manual_seed(0)
    return FedAvg(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8), "lr": 0.1,
                     **kwargs})


# ===================================================================== PSNR
def test_psnr_matches_hand_computed_values():
    real = torch.zeros(1, 1, 2, 2)
    recovered = torch.tensor([[[[0.1, 0.1], [0.1, 0.1]]]])  # MSE 0.01 -> 20 dB
    assert psnr(recovered, real) == pytest.approx(20.0)
    recovered = torch.tensor([[[[0.2, 0.0], [0.0, 0.0]]]])  # MSE 0.04 / 4 = 0.01 -> 20 dB
    assert psnr(recovered, real) == pytest.approx(20.0)
    assert psnr(recovered * 255, real, data_range=255.0) == pytest.approx(20.0)
    assert psnr(real, real) == math.inf


def test_psnr_of_a_batch_matches_images_in_the_best_order():
    real = torch.stack([torch.zeros(1, 2, 2), torch.ones(1, 2, 2)])
    recovered = torch.stack([torch.full((1, 2, 2), 0.99), torch.full((1, 2, 2), 0.1)])
    # swapped order: pairs (0.1 vs 0) -> 20 dB and (0.99 vs 1) -> 40 dB
    assert psnr(recovered, real) == pytest.approx(30.0)


def test_psnr_refuses_mismatched_shapes_and_bad_range():
    with pytest.raises(ValueError, match="shapes differ"):
        psnr(torch.zeros(1, 4), torch.zeros(1, 5))
    with pytest.raises(ValueError, match="data_range"):
        psnr(torch.zeros(1, 4), torch.zeros(1, 4), data_range=0)


# ===================================================================== DLG
def test_dlg_recovers_an_input_from_a_linear_models_update():
    torch.manual_seed(0)
    model = nn.Linear(64, 4)
    x = torch.rand(1, 64)
    loss = nn.functional.cross_entropy(model(x), torch.tensor([2]))
    grads = torch.autograd.grad(loss, list(model.parameters()))
    update = {n: -0.1 * g for (n, _), g in zip(model.named_parameters(), grads, strict=True)}
    recovered = dlg_attack(model, (1, 64), update, ["weight", "bias"], iterations=200,
                           step_lr=0.1, input_range=(0.0, 1.0))
    random_psnr = psnr(torch.rand(1, 64, generator=torch.Generator().manual_seed(1)), x)
    assert psnr(recovered, x) > random_psnr + 15
    assert all(p.grad is None for p in model.parameters())  # the attack leaves .grad alone


def test_dlg_recovers_an_8x8_input_from_a_tiny_cnn_update():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(256, 4))
    x = torch.rand(1, 1, 8, 8)
    loss = nn.functional.cross_entropy(model(x), torch.tensor([1]))
    names = [n for n, _ in model.named_parameters()]
    grads = torch.autograd.grad(loss, list(model.parameters()))
    update = {n: -0.05 * g for n, g in zip(names, grads, strict=True)}
    recovered = dlg_attack(model, (1, 1, 8, 8), update, names, iterations=300, step_lr=0.05,
                           input_range=(0.0, 1.0))
    random_psnr = psnr(torch.rand(1, 1, 8, 8, generator=torch.Generator().manual_seed(1)), x)
    assert psnr(recovered, x) > random_psnr + 10


def test_evaluate_client_leakage_attacks_one_step_and_restores_the_client():
    data = tiny_data(num_clients=1)
    data.setup("fit")
    x, y = data.client_train(0)
    client = make_client(backbone_kwargs={"hidden": (32,)})
    before = {k: v.clone() for k, v in client.state_dict().items()}
    value_range = (float(x.min()), float(x.max()))
    leak = evaluate_client_leakage(client, (x[:1], y[:1]), surface="model", iterations=300,
                                   value_range=value_range)
    guess = torch.rand(1, *x.shape[1:], generator=torch.Generator().manual_seed(1))
    real01 = (x[:1] - value_range[0]) / (value_range[1] - value_range[0])
    assert leak > psnr(guess, real01) + 10
    for key, value in client.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert all(p.grad is None for p in client.parameters())
    assert client.pop_federated_logs() == {}
    # the feature extractor alone ("-fe") is attackable too, and the mean over batches runs
    assert client_leakage(client, (x, y), batches=2, iterations=20) > 0


def test_attacking_a_private_part_is_refused():
    data = tiny_data(num_clients=1)
    data.setup("fit")
    x, y = data.client_train(0)
    client = make_client(extra_private=["model.head.*"])
    with pytest.raises(ValueError, match="never receives"):
        evaluate_client_leakage(client, (x[:1], y[:1]), surface="model", iterations=1)
    with pytest.raises(ValueError, match="surface"):
        evaluate_client_leakage(client, (x[:1], y[:1]), surface="head", iterations=1)


def test_trainer_logs_dlg_psnr_every_k_rounds(tmp_path):
    trainer = tiny_trainer(tmp_path, rounds=2, probes=[DLGProbe(every=2,
                                                                 options={"iterations": 10})])
    trainer.fit(make_client(), tiny_data())
    assert "dlg_psnr" not in trainer.history[0]
    assert trainer.history[1]["dlg_psnr"] > 0


# ===================================================================== DP
def test_clipping_bounds_every_update_and_leaves_small_ones_and_integers_alone():
    dp = ClientLevelDP(clip_norm=1.0, noise_multiplier=1.0)
    generator = torch.Generator().manual_seed(0)
    for scale in (0.01, 0.5, 3.0, 100.0):
        update = {"w": scale * torch.randn(10, 10, generator=generator),
                  "b": scale * torch.randn(10, generator=generator),
                  "num_batches_tracked": torch.tensor(7)}
        clipped = dp.clip(update)
        assert update_norm(clipped) <= 1.0 + 1e-6
        assert torch.equal(clipped["num_batches_tracked"], torch.tensor(7))
        if update_norm(update) <= 1.0:
            assert all(torch.equal(clipped[k], update[k]) for k in update)
        else:
            assert update_norm(clipped) == pytest.approx(1.0)


def test_noise_has_the_configured_standard_deviation():
    dp = ClientLevelDP(clip_norm=0.5, noise_multiplier=2.0)
    zeros = {"w": torch.zeros(200_000), "n": torch.tensor(8)}
    noisy = dp.noisy_mean(zeros, num_participants=4, generator=noise_generator(0, 3))
    expected = 2.0 * 0.5 / 4  # z * S on the sum, divided by the participants
    assert noisy["w"].std().item() == pytest.approx(expected, rel=0.01)
    assert abs(noisy["w"].mean().item()) < 0.01 * expected
    assert noisy["n"].item() == 2  # integer buffers: plain mean, no noise
    again = dp.noisy_mean(zeros, 4, noise_generator(0, 3))
    assert torch.equal(again["w"], noisy["w"])  # seeded by (seed, round)
    assert not torch.equal(dp.noisy_mean(zeros, 4, noise_generator(0, 4))["w"], noisy["w"])


def test_epsilon_grows_with_rounds_and_matches_the_accountant():
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant

    dp = ClientLevelDP(clip_norm=1.0, noise_multiplier=1.1, delta=1e-5)
    values = [dp.epsilon(rounds, 0.1) for rounds in (1, 10, 100)]
    assert 0 < values[0] < values[1] < values[2]
    accountant = rdp_privacy_accountant.RdpAccountant()
    accountant.compose(dp_accounting.PoissonSampledDpEvent(
        0.1, dp_accounting.GaussianDpEvent(1.1)), 100)
    assert values[2] == pytest.approx(accountant.get_epsilon(1e-5))
    assert dp.epsilon(0, 0.1) == 0.0
    assert ClientLevelDP(1.0, 0.0).epsilon(5, 1.0) == math.inf


def test_bad_dp_settings_are_refused():
    with pytest.raises(ValueError, match="clip_norm"):
        ClientLevelDP(clip_norm=0.0, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="noise_multiplier"):
        ClientLevelDP(clip_norm=1.0, noise_multiplier=-1.0)
    with pytest.raises(ValueError, match="delta"):
        ClientLevelDP(clip_norm=1.0, noise_multiplier=1.0, delta=1.0)
    with pytest.raises(ValueError, match="unknown DLGProbe option.*iteratons"):
        DLGProbe(options={"iteratons": 10})  # a typo fails before any training


def test_dp_round_is_the_clipped_noisy_mean_of_the_updates():
    generator = torch.Generator().manual_seed(0)
    sent = {"w": torch.randn(5, 3, generator=generator), "n": torch.tensor(4)}
    uploads = [{"w": sent["w"] + scale * torch.randn(5, 3, generator=generator),
                "n": torch.tensor(4 + i)} for i, scale in enumerate((0.1, 1.0, 10.0))]
    # an unreachable bound and no noise: DP-FedAvg's server rule is the uniform mean
    loose = ClientLevelDP(clip_norm=1e9, noise_multiplier=0.0).accumulator(sent, generator)
    for upload in uploads:
        loose.add(upload)
    mean = loose.mean()
    assert torch.allclose(mean["w"], torch.stack([u["w"] for u in uploads]).mean(0), atol=1e-6)
    assert mean["n"].item() == 5 and mean["n"].dtype == torch.int64
    # a tight bound: each update clipped, so the step (their mean) has norm <= S
    dp = ClientLevelDP(clip_norm=0.05, noise_multiplier=0.0)
    tight = dp.accumulator(sent, generator)
    for upload in uploads:
        tight.add(upload)
    clipped = [dp.clip({"w": u["w"] - sent["w"]})["w"] for u in uploads]
    assert torch.allclose(tight.mean()["w"], sent["w"] + torch.stack(clipped).mean(0), atol=1e-6)
    assert update_norm({"w": tight.mean()["w"] - sent["w"]}) <= 0.05 + 1e-6
    assert tight.norms == pytest.approx([update_norm({"w": u["w"] - sent["w"]}) for u in uploads])
    with pytest.raises(ValueError, match="uniform"):
        tight.add(uploads[0], weight=3.0)


def test_dp_never_touches_private_parameters_and_reports_epsilon(tmp_path):
    private = ["model.head.*"]
    plain = tiny_trainer(tmp_path, rounds=1, weighting="uniform", run_name="plain")
    plain.fit(make_client(extra_private=private), tiny_data())
    noisy = tiny_trainer(tmp_path, rounds=1, weighting="uniform", run_name="noisy",
                         join_ratio=0.5)
    noisy.fit(make_client(extra_private=private), tiny_data(),
              server=DPFedAvg(clip_norm=0.1, noise_multiplier=5.0))
    assert not any(k.startswith("model.head") for k in noisy.global_state)
    for client_id, state in plain.client_states.items():
        if client_id in noisy.client_states:  # the head is what local training produced
            for key, value in state.items():
                assert torch.equal(noisy.client_states[client_id][key], value), key
    key = "model.encoder.fc.0.weight"
    assert not torch.allclose(noisy.global_state[key], plain.global_state[key], atol=1e-3)
    summary = json.loads((tmp_path / "noisy" / "summary.json").read_text())
    assert summary["dp_epsilon"] == pytest.approx(ClientLevelDP(0.1, 5.0).epsilon(1, 0.5))
    assert noisy.history[-1]["dp_epsilon"] == summary["dp_epsilon"]


def test_dp_with_sample_weighting_is_refused_by_the_trainer(tmp_path):
    with pytest.raises(ValueError, match="uniform"):
        tiny_trainer(tmp_path).fit(make_client(), tiny_data(),
                                   server=DPFedAvg(clip_norm=1.0, noise_multiplier=1.0))
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_the_dlg_probe_gives_the_same_value_with_one_or_two_processes(tmp_path):
    """Client 0 belongs to rank 1 on this split: the probe runs where the client lives."""
    from fedlight.federation.processes.collectives import balanced_owners

    split = dict(partition=Dirichlet(beta=0.5, min_client_size=5))
    data = tiny_data(**split)
    data.setup("fit")
    assert balanced_owners([data.client_train_size(i) for i in range(4)], 2)[0] == 1
    values = []
    for devices, strategy in ((1, "auto"), (2, "ddp_fork")):
        trainer = tiny_trainer(tmp_path / str(devices), rounds=1, threads=1, devices=devices,
                               strategy=strategy,
                               probes=[DLGProbe(options={"iterations": 5})])
        trainer.fit(make_client(), tiny_data(**split))
        values.append(trainer.history[-1]["dlg_psnr"])
    assert values[0] == pytest.approx(values[1], rel=1e-6)
