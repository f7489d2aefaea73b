"""FedBABU: the head never trains in rounds, fine-tuning at evaluation is scored, never kept."""

from __future__ import annotations

import pytest
import torch

from fedlight.clients.fedbabu import FedBABU
from fedlight.data.partitions.dirichlet import Dirichlet
from tests.conftest import tiny_data, tiny_trainer


def make(**kwargs):
    torch.manual_seed(0)
    return FedBABU(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8),
                      "lr": 0.1, **kwargs})


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"finetune_epochs": -1}, "finetune_epochs must be >= 0, got -1"),
    ({"finetune_part": "tail"}, "'tail'; valid: full, head, body"),
])
def test_bad_constructor_values_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(**kwargs)


def test_evaluation_phases_fine_tune_the_chosen_part():
    assert make(finetune_epochs=0).evaluation_phases() == []
    (phase,) = make(finetune_epochs=3, finetune_part="head").evaluation_phases()
    assert (phase.epochs, phase.trainable) == (3, ("model.head.*",))
    assert make().evaluation_phases()[0].trainable is None


def fit(tmp_path, name, **options):
    kwargs = {k: options.pop(k) for k in ("finetune_epochs",) if k in options}
    client = make(**kwargs)
    trainer = tiny_trainer(tmp_path, run_name=name, checkpoint_every=2,
                           **{"rounds": 2, **options})
    trainer.fit(client, tiny_data(partition=Dirichlet(beta=0.3, min_client_size=5)))
    return client, trainer


def test_head_keeps_its_initialization_while_the_body_trains(tmp_path):
    initial = {k: v.clone() for k, v in make().state_dict().items()}
    _, trainer = fit(tmp_path, "babu")
    for key, value in trainer.global_state.items():
        assert torch.equal(value, initial[key]) == key.startswith("model.head."), key


def test_fine_tuning_is_scored_and_does_not_leak_into_the_next_round(tmp_path):
    _, every = fit(tmp_path, "every", eval_every=1)
    _, last = fit(tmp_path, "last", eval_every=2)
    _, plain = fit(tmp_path, "plain", eval_every=2, finetune_epochs=0)
    for key, value in every.global_state.items():  # evaluating round 1 changed nothing
        assert torch.equal(value, last.global_state[key]), key
        assert torch.equal(value, plain.global_state[key]), key
    assert every.history[-1]["personalized_accuracy"] == last.history[-1]["personalized_accuracy"]
    assert last.history[-1]["global_accuracy"] == plain.history[-1]["global_accuracy"]
    assert last.history[-1]["personalized_accuracy"] != plain.history[-1]["personalized_accuracy"]
