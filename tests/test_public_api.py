"""The public API for reuse: what ``fedlight`` and ``fedlight.clients`` export (explicit
imports, checked against the discovered client classes), and every client class fitting a few
steps in a plain ``lightning.Trainer``, as any ``LightningModule`` would."""

from __future__ import annotations

import ast
import inspect

import lightning as L
import pytest
import torch

import fedlight
import fedlight.clients
from fedlight.clients import CLIENTS, discover_clients
from tests.conftest import make_client, tiny_data

MAIN_CLASSES = {"FederatedClient", "FederatedDataModule", "FederatedTrainer"}
STEPS = 2

# The backbone a class needs where the smallest one (an MLP, tiny_data's 1x8x8 samples) does
# not serve it, and why.
BACKBONE_NEEDED = {
    "FedBN": "resnet20",  # keeps its BatchNorm layers private: refuses a model without any
}


def imported_names(module) -> set[str]:
    """Names the module's source binds with ``from ... import`` statements."""
    tree = ast.parse(inspect.getsource(module))
    return {alias.asname or alias.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) for alias in node.names}


def literal_all(module) -> list[str]:
    """The module's ``__all__``, which must be written out as a literal list."""
    tree = ast.parse(inspect.getsource(module))
    [value] = [node.value for node in tree.body if isinstance(node, ast.Assign)
               and any(getattr(t, "id", None) == "__all__" for t in node.targets)]
    return list(ast.literal_eval(value))


@pytest.mark.parametrize("package", [fedlight.clients, fedlight], ids=lambda p: p.__name__)
def test_every_discovered_client_class_is_imported_and_listed_explicitly(package):
    exported = literal_all(package)
    assert exported == package.__all__ and len(set(exported)) == len(exported)
    missing = sorted(set(discover_clients()) - set(exported))
    assert not missing, f"import and list in {package.__name__}: {missing}"
    assert set(discover_clients()) <= imported_names(package)
    for name in exported:
        assert hasattr(package, name), f"{package.__name__}.__all__ names {name}, not defined"
    for name in discover_clients():
        assert getattr(package, name) is CLIENTS[name]


def test_fedlight_exports_the_main_user_classes_and_nothing_else():
    from fedlight.data import FederatedDataModule
    from fedlight.federation.trainer import FederatedTrainer

    assert set(fedlight.__all__) == set(CLIENTS) | MAIN_CLASSES | {"__version__"}
    assert fedlight.FederatedDataModule is FederatedDataModule
    assert fedlight.FederatedTrainer is FederatedTrainer
    assert isinstance(fedlight.__version__, str)


@pytest.fixture(scope="module")
def one_client_data():
    """One client's train / test split of tiny_data, as a plain LightningDataModule."""
    return tiny_data(num_clients=2).client(0)


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_every_client_class_fits_a_few_steps_in_a_plain_lightning_trainer(
        name, one_client_data, tmp_path):
    client = make_client(CLIENTS[name], backbone=BACKBONE_NEEDED.get(name, "mlp"))
    before = {k: v.detach().clone() for k, v in client.named_parameters()}
    trainer = L.Trainer(max_steps=STEPS, accelerator="cpu", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0,
                        num_sanity_val_steps=0, default_root_dir=tmp_path)
    trainer.fit(client, one_client_data)
    assert trainer.global_step == STEPS
    moved = [k for k, v in client.named_parameters() if not torch.equal(v, before[k])]
    assert moved, f"{name}: no parameter changed in {STEPS} steps"
    assert all(torch.isfinite(v).all() for v in client.parameters())
