"""The local loop honours the LightningModule contract: schedulers as lightning.Trainer steps
them, the training hooks, gradient clipping, every configure_optimizers form, and
optimizer_state: persist (momentum kept per client, through a resume)."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.fabric import Fabric
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader

from fedlight.clients import FedAvg, Phase
from fedlight.core.seeding import seed_global_rngs
from fedlight.federation.training_loop import TrainingLoop, parse_optimizers, reads_stale_gradients
from tests.conftest import make_client, tiny_data, tiny_trainer


class Scheduled(FedAvg):
    """SGD with momentum + StepLR(1, 0.5) at ``interval``; records the lr of every step."""

    def __init__(self, interval: str = "step", **kwargs) -> None:
        super().__init__(**kwargs)
        self.interval = interval
        self.lrs: list[float] = []

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": StepLR(optimizer, 1, 0.5), "interval": self.interval}}

    def on_before_optimizer_step(self, optimizer) -> None:
        self.lrs.append(optimizer.param_groups[0]["lr"])
        super().on_before_optimizer_step(optimizer)


def batches(count: int = 3):
    generator = torch.Generator().manual_seed(0)
    return [(torch.randn(8, 1, 8, 8, generator=generator),
             torch.randint(0, 4, (8,), generator=generator)) for _ in range(count)]


@pytest.mark.parametrize("interval", ["step", "epoch"])
def test_scheduler_steps_exactly_as_in_a_plain_lightning_trainer(interval):
    data = batches()
    federated = make_client(Scheduled, interval=interval)
    loop = TrainingLoop(Fabric(accelerator="cpu", devices=1), batch_size=8)
    loop.run_phase(federated, Phase("train", 2), lambda: iter(data))

    plain = make_client(Scheduled, interval=interval)
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(plain, DataLoader(data, batch_size=None))

    assert federated.lrs == plain.lrs
    assert len(set(federated.lrs)) > 1  # the rate did decay
    for key, value in plain.state_dict().items():
        assert torch.allclose(federated.state_dict()[key], value, atol=1e-6), key


class HookCounter(FedAvg):
    HOOKS = ("on_train_start", "on_train_epoch_start", "on_train_batch_start",
             "on_before_backward", "on_after_backward", "on_before_zero_grad",
             "on_before_optimizer_step", "on_train_batch_end", "on_train_epoch_end",
             "on_train_end", "on_validation_epoch_start")

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.calls: dict[str, int] = {}
        for name in self.HOOKS:
            setattr(self, name, self._counting(name, getattr(self, name)))

    def _counting(self, name, hook):
        def counted(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            return hook(*args, **kwargs)
        return counted


def test_training_hooks_are_called_and_validation_hooks_are_not(tmp_path):
    client = make_client(HookCounter)
    trainer = tiny_trainer(tmp_path, rounds=2, local_epochs=2)
    trainer.fit(client, tiny_data())
    calls = client.calls
    per_step = ("on_train_batch_start", "on_before_backward", "on_after_backward",
                "on_before_zero_grad", "on_before_optimizer_step", "on_train_batch_end")
    assert len({calls[name] for name in per_step}) == 1 and calls["on_after_backward"] > 0
    assert calls["on_train_epoch_start"] == calls["on_train_epoch_end"] == 2 * 2 * 4
    assert calls["on_train_start"] == calls["on_train_end"] == 2 * 4
    assert "on_validation_epoch_start" not in calls  # no validation loop runs locally


def test_gradient_clipping_bounds_the_update():
    data = batches(1)
    moved = []
    for clip in (None, 1e-4):
        client = make_client(FedAvg)
        before = torch.cat([p.detach().flatten().clone() for p in client.parameters()])
        loop = TrainingLoop(Fabric(accelerator="cpu", devices=1), 8, gradient_clip_val=clip)
        loop.run_phase(client, Phase("train", 1), lambda: iter(data))
        after = torch.cat([p.detach().flatten() for p in client.parameters()])
        moved.append(float((after - before).norm()))
    # lr 0.1 times a gradient of norm <= 1e-4
    assert moved[1] <= 0.1 * 1e-4 * 1.001 < moved[0]


def test_every_configure_optimizers_form_lightning_accepts():
    weight = torch.nn.Parameter(torch.zeros(1))
    sgd = torch.optim.SGD([weight], lr=0.1)
    scheduler = StepLR(sgd, 1)
    for form in (sgd, [sgd], ([sgd], [scheduler]), {"optimizer": sgd},
                 {"optimizer": sgd, "lr_scheduler": scheduler},
                 {"optimizer": sgd, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch",
                                                     "frequency": 2}}):
        optimizer, schedulers = parse_optimizers(form)
        assert optimizer is sgd and all(c.scheduler is scheduler for c in schedulers)
    with pytest.raises(TypeError, match="several optimizers"):
        parse_optimizers([sgd, torch.optim.SGD([weight], lr=0.1)])
    with pytest.raises(TypeError, match="ReduceLROnPlateau"):
        parse_optimizers({"optimizer": sgd, "lr_scheduler": torch.optim.lr_scheduler.
                          ReduceLROnPlateau(sgd)})


def test_bad_loop_options_are_refused():
    with pytest.raises(ValueError, match="optimizer_state 'keep'"):
        tiny_trainer("unused", optimizer_state="keep")
    with pytest.raises(ValueError, match="gradient_clip_algorithm"):
        tiny_trainer("unused", gradient_clip_algorithm="l1")


# ===================================================================== optimizer_state
def momentum_client():
    return make_client(FedAvg, momentum=0.9, extra_private=["model.head.*"])


def test_persist_keeps_each_clients_momentum_between_rounds(tmp_path):
    states = {}
    for mode in ("fresh", "persist"):
        trainer = tiny_trainer(tmp_path, rounds=2, optimizer_state=mode, run_name=mode)
        trainer.fit(momentum_client(), tiny_data())
        states[mode] = trainer
    saved = states["persist"].population.optimizer_states
    assert sorted(saved) == [0, 1, 2, 3] and not states["fresh"].population.optimizer_states
    buffers = [s["optimizer"]["state"][0]["momentum_buffer"] for s in saved[0].values()]
    assert buffers and all(b.abs().sum() > 0 for b in buffers)
    key = "model.head.weight"
    assert not torch.equal(states["fresh"].client_states[0][key],
                           states["persist"].client_states[0][key])


def test_persisted_optimizer_state_survives_a_resume(tmp_path):
    full = tiny_trainer(tmp_path, rounds=3, optimizer_state="persist", run_name="full")
    full.fit(momentum_client(), tiny_data())
    tiny_trainer(tmp_path, rounds=2, optimizer_state="persist", run_name="resumed").fit(
        momentum_client(), tiny_data())
    resumed = tiny_trainer(tmp_path, rounds=3, optimizer_state="persist", run_name="resumed")
    resumed.fit(momentum_client(), tiny_data(), ckpt_path="last")
    for key, value in full.global_state.items():
        assert torch.equal(value, resumed.global_state[key]), key
    for client_id in range(4):
        for key, value in full.client_states[client_id].items():
            assert torch.equal(value, resumed.client_states[client_id][key])


class ReadsGradientsAfterStep(FedAvg):
    """Overrides on_train_batch_end to look at the gradients the step left behind."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.grads_seen_after_step: list[bool] = []

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        self.grads_seen_after_step.append(
            all(p.grad is not None for p in self.parameters()))


def grads_alive_at_each_forward(client) -> list[bool]:
    """Train one 3-batch phase; whether the previous step's gradients were still alive at
    each forward (a torch forward pre-hook, not a Lightning hook)."""
    alive: list[bool] = []
    handle = client.model.register_forward_pre_hook(
        lambda module, args: alive.append(any(p.grad is not None for p in module.parameters())))
    TrainingLoop(Fabric(accelerator="cpu", devices=1), batch_size=8).run_phase(
        client, Phase("train", 1), lambda: iter(batches()))
    handle.remove()
    return alive


def test_gradients_are_freed_after_the_step_unless_a_later_hook_may_read_them():
    plain = make_client(FedAvg)
    assert not reads_stale_gradients(plain)
    assert grads_alive_at_each_forward(plain) == [False, False, False]

    reading = make_client(ReadsGradientsAfterStep)
    assert reads_stale_gradients(reading)
    # Lightning's timing: gradients live until the next step's zero_grad
    assert grads_alive_at_each_forward(reading) == [False, True, True]
    assert reading.grads_seen_after_step == [True, True, True]
    # a hook set on the instance counts too
    patched = make_client(FedAvg)
    patched.on_before_zero_grad = lambda optimizer: None
    assert reads_stale_gradients(patched)
    # freeing early changes no number
    for key, value in plain.state_dict().items():
        assert torch.equal(reading.state_dict()[key], value), key


class BackwardInStep(FedAvg):
    """Back-propagates a large extra loss inside training_step: Lightning's zero_grad, between
    training_step and the loop's backward, must discard those gradients."""

    def training_step(self, batch, batch_idx):
        (1e3 * sum(p.sum() for p in self.parameters())).backward()
        return super().training_step(batch, batch_idx)


class CountingSGD(torch.optim.SGD):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.zero_grad_calls = 0

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.zero_grad_calls += 1
        super().zero_grad(set_to_none)


def test_zero_grad_runs_between_training_step_and_backward():
    plain, extra = make_client(FedAvg), make_client(BackwardInStep)
    for client in (plain, extra):
        TrainingLoop(Fabric(accelerator="cpu", devices=1), batch_size=8).run_phase(
            client, Phase("train", 1), lambda: iter(batches()))
    for key, value in plain.state_dict().items():
        assert torch.equal(extra.state_dict()[key], value), key


def test_an_optimizer_with_its_own_zero_grad_is_called_every_step():
    client = make_client(FedAvg)
    optimizer = CountingSGD(client.parameters(), lr=0.1)
    TrainingLoop(Fabric(accelerator="cpu", devices=1), batch_size=8).run_phase(
        client, Phase("train", 1), lambda: iter(batches()), optimizer=optimizer)
    assert optimizer.zero_grad_calls == 3  # once per step, at Lightning's point only


def test_hooks_receive_the_configured_torch_optimizer():
    seen = []

    class Recording(FedAvg):
        def on_before_optimizer_step(self, optimizer) -> None:
            seen.append(type(optimizer))

    TrainingLoop(Fabric(accelerator="cpu", devices=1), batch_size=8).run_phase(
        make_client(Recording), Phase("train", 1), lambda: iter(batches(1)))
    assert seen == [torch.optim.SGD]


def test_client_seeding_gives_torch_manual_seeds_cpu_stream():
    torch.manual_seed(11)
    expected = torch.rand(5)
    torch.manual_seed(0)
    seed_global_rngs(11, torch.device("cpu"))
    assert torch.equal(torch.rand(5), expected)
