import csv
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedlight.analysis.interpolation import grid_values, interpolation_grid
from fedlight.analysis.runs import load_finished_run
from fedlight.clients import AutoCS, AutoHS, AutoSA, FedAvg, Local, Privatize
from fedlight.clients.privatize import (
    all_ways,
    paper_ways,
    parse_way,
    ps_way,
    sp_way,
    sps_way,
    ssp_way,
)
from fedlight.models import BACKBONES, Backbone
from tests.conftest import tiny_data, tiny_trainer

X = torch.randn(6, 1, 8, 8, generator=torch.Generator().manual_seed(1))
Y = torch.tensor([0, 1, 2, 3, 0, 1])


def tiny6(input_shape, num_classes):
    """A 6-block MLP with a fine cut (the shape of VGG11's, at a fraction of the cost)."""
    first = nn.Sequential(nn.Flatten(), nn.Linear(64, 12), nn.ReLU())
    encoder = nn.Sequential(first, *[nn.Sequential(nn.Linear(12, 12), nn.ReLU())
                                     for _ in range(4)])
    fine = [f"encoder.{i}" for i in range(5)] + ["head"]
    return Backbone(encoder, 12, num_classes, input_shape, name="tiny6", fine_blocks=fine)


@pytest.fixture
def six_blocks(monkeypatch):
    monkeypatch.setitem(BACKBONES, "tiny6", tiny6)


def make(cls=Privatize, seed=0, **kwargs):
    torch.manual_seed(seed)
    options = {"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8), "lr": 0.1}
    return cls(**{**options, **kwargs})


def one_step(client):
    before = {k: v.clone() for k, v in client.state_dict().items()}
    optimizer = client.configure_optimizers()
    loss = client.training_step((X, Y), 0)
    loss.backward()
    optimizer.step()
    after = client.state_dict()
    return loss, [k for k in before if not torch.equal(before[k], after[k])]


def read_metrics(run_dir):
    with open(run_dir / "metrics.csv") as handle:
        return list(csv.DictReader(handle))


# ===================================================================== strings
def test_family_helpers_match_the_papers_examples():
    assert sps_way(5, 4) == "AaBbCcDE" and sp_way(3, 3) == "ABc" and ssp_way(2, 2) == "ABb"
    assert ps_way(2, 2) == "aB" and ps_way(2, 1) == "AB" and sp_way(2, 1) == "ab"
    assert ssp_way(2, 1) == "AaBb" and sps_way(2, 2) == "AaB" and sp_way(6, 2) == "Abcdef"
    assert set(paper_ways(2)) == {"AB", "aB", "ab", "Ab", "AaB", "AaBb", "ABb"}
    assert len(all_ways(2)) == 9 and len(set(all_ways(6))) == 3 ** 6
    with pytest.raises(ValueError, match="b must be in 1..2.*got 3"):
        ps_way(2, 3)


def test_parse_way_reads_shared_and_private_copies():
    assert parse_way("AaB", ["encoder", "head"]) == [(True, True), (True, False)]
    assert parse_way("aBb", ["encoder", "head"]) == [(False, True), (True, True)]


@pytest.mark.parametrize("bad", ["BA", "", "A_b", "aA", "ABC", "Ab_"])
def test_invalid_strings_are_rejected_with_a_valid_example(bad):
    with pytest.raises(ValueError) as error:
        make(way=bad)
    message = str(error.value)
    assert f'invalid privatization "{bad}" for a 2-block backbone (encoder, head)' in message
    assert "in order A..B" in message and 'e.g. "AaB" or "ABb"' in message


def test_a_two_block_string_is_rejected_for_a_three_block_cut():
    with pytest.raises(ValueError, match=r'"AB" for a 3-block backbone \(x, y, z\).*A\.\.C.*'
                                         r'e\.g\. "AaBC" or "ABCc".*block C is missing'):
        parse_way("AB", ["x", "y", "z"])


def test_a_short_string_on_the_fine_cut_names_the_six_blocks(six_blocks):
    with pytest.raises(ValueError, match=r'"AB" for a 6-block backbone \(encoder.0, .*head\)'):
        make(way="AB", backbone="tiny6", cut="fine")
    with pytest.raises(ValueError, match="has no 'fine' cut"):
        make(way="AB", cut="fine")
    with pytest.raises(ValueError, match="unknown combine 'max'"):
        make(combine="max")


# ===================================================================== construction, forward
@pytest.mark.parametrize("way", all_ways(2))
def test_every_two_block_way_builds_and_trains_a_step(way):
    client = make(way=way)
    loss, changed = one_step(client)
    assert torch.isfinite(loss)
    assert set(changed) == set(client.state_dict())  # every copy is used and trained
    assert client.has_global_model == (way[0] == "A" and "B" in way)
    outputs = client.path_outputs(X)
    assert len(outputs) == (2 if "Bb" in way else 1)


FINE_SAMPLE = ["ABCDEF", "abcdef", "abcDEF", "ABCdef", "AaBbCcDEF", "ABCDEeFf", "AaBbCcDdEeFf",
               "aBcDeF", "AaBCcDEFf", "AbcdeF", "ABbCDEF"]


@pytest.mark.parametrize("way", FINE_SAMPLE)
def test_six_block_ways_build_and_train_a_step(six_blocks, way):
    client = make(way=way, backbone="tiny6", cut="fine")
    loss, changed = one_step(client)
    assert torch.isfinite(loss) and set(changed) == set(client.state_dict())
    assert client.has_global_model == all(c in way for c in "ABCDEF")


def test_vgg11_fine_cut_builds_the_papers_six_blocks():
    torch.manual_seed(0)
    client = Privatize(way="AaBbCcDEF", cut="fine", backbone="vgg11", num_classes=10,
                       input_shape=(3, 32, 32), backbone_kwargs={"all_fc_head": True})
    assert client.block_names == ["encoder.0", "encoder.1", "encoder.2", "encoder.3",
                                  "head.0", "head.1"]
    assert sorted(client.private) == ["a", "b", "c"]
    assert client(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_private_copies_are_fresh_initializations_not_clones():
    client = make(way="AaBb")
    for shared, private in zip(client.model.encoder.parameters(),
                               client.private["a"].parameters(), strict=True):
        assert shared.shape == private.shape and not torch.equal(shared, private)


def test_double_encoder_averages_features_and_double_head_shares_the_feature():
    client = make(way="AaB").eval()
    expected = client.model.head((client.model.encoder(X) + client.private["a"](X)) / 2)
    torch.testing.assert_close(client(X), expected)

    client = make(way="ABb").eval()
    h = client.model.encoder(X)
    shared, private = client.path_outputs(X)
    torch.testing.assert_close(shared, client.model.head(h))
    torch.testing.assert_close(private, client.private["b"](h))
    mean = (F.softmax(shared, -1) + F.softmax(private, -1)) / 2
    torch.testing.assert_close(client(X), mean.log())
    client.capture_logs(True)
    loss = client.training_step((X, Y), 0)
    torch.testing.assert_close(loss, F.cross_entropy(shared, Y) + F.cross_entropy(private, Y))
    logs = client.pop_federated_logs()
    torch.testing.assert_close(logs["ce/shared_path"], F.cross_entropy(shared, Y))
    torch.testing.assert_close(logs["ce/private_path"], F.cross_entropy(private, Y))
    torch.testing.assert_close(logs["train_loss"], loss)

    client = make(way="ABb", combine="product").eval()
    product = F.softmax(shared, -1) * F.softmax(private, -1)
    torch.testing.assert_close(client(X), (product / product.sum(-1, keepdim=True)).log())


def test_split_merge_split_follows_the_two_path_rule(six_blocks):
    client = make(way="AaBCcDEF", backbone="tiny6", cut="fine").eval()
    blocks = client.primary_blocks
    shared, private = blocks[0](X), client.private["a"](X)
    merged = blocks[1]((shared + private) / 2)
    shared, private = blocks[2](merged), client.private["c"](merged)
    merged = blocks[3]((shared + private) / 2)
    torch.testing.assert_close(client(X), blocks[5](blocks[4](merged)))


# ===================================================================== federation
@pytest.mark.parametrize("way", all_ways(2))
def test_private_copies_never_appear_in_an_upload(way):
    client = make(way=way)
    uploaded = set(client.upload().state)
    private = set(client.partition.private)
    assert not uploaded & private
    assert all(k.startswith("model.") for k in uploaded)
    shared_blocks = [name for name, (shared, _) in zip(["encoder", "head"], client.copies,
                                                      strict=True) if shared]
    assert uploaded == {k for k in client.state_dict()
                        if k.split(".")[1] in shared_blocks and k.startswith("model.")}


@pytest.fixture(scope="module")
def aabb_run(tmp_path_factory):
    """One short federated "AaBb" run shared by the tests below: (trainer, data, run folder)."""
    root = tmp_path_factory.mktemp("aabb")
    data = tiny_data()
    trainer = tiny_trainer(root, rounds=2, run_name="aabb", weighting="uniform")
    trainer.fit(make(way="AaBb", evaluate_after_training=False), data)  # stored-state scores
    return trainer, data, root / "aabb"


def test_federated_run_keeps_private_copies_on_clients(aabb_run):
    trainer, _, run_dir = aabb_run
    assert not any(k.startswith("private.") for k in trainer.global_state)
    states = trainer.client_states
    assert len(states) == 4 and all(set(s) == {k for k in s if k.startswith("private.")}
                                    for s in states.values())
    assert not torch.equal(states[0]["private.a.fc.0.weight"], states[1]["private.a.fc.0.weight"])
    rows = read_metrics(run_dir)
    assert {"shared_path_accuracy", "private_path_accuracy", "train/ce/shared_path"} <= set(rows[0])
    assert rows[-1]["global_accuracy"] != ""


def test_two_branch_shared_model_trains_exactly_as_fedavg(aabb_run, tmp_path):
    trainer, data, _ = aabb_run
    fedavg = tiny_trainer(tmp_path, rounds=2, weighting="uniform")
    fedavg.fit(make(FedAvg), data)
    assert set(trainer.global_state) == set(fedavg.global_state)
    for key, value in fedavg.global_state.items():
        assert torch.equal(trainer.global_state[key], value), key


@pytest.mark.parametrize(("way", "reference"), [("AB", FedAvg), ("ab", Local)])
def test_all_shared_is_fedavg_and_all_private_is_local(tmp_path, way, reference):
    def run(client, name):
        trainer = tiny_trainer(tmp_path, rounds=2, run_name=name, join_ratio=0.5)
        trainer.fit(client, tiny_data())
        rows = [{k: v for k, v in r.items() if k != "seconds"}
                for r in read_metrics(tmp_path / name)]
        return rows, trainer

    ours, ours_trainer = run(make(way=way, evaluate_after_training=False), "ours")
    theirs, their_trainer = run(make(reference), "theirs")
    assert ours == theirs
    assert set(ours_trainer.global_state) == set(their_trainer.global_state)
    for key, value in their_trainer.global_state.items():
        assert torch.equal(ours_trainer.global_state[key], value), key
    for client_id, state in their_trainer.client_states.items():
        for key, value in state.items():
            assert torch.equal(ours_trainer.client_states[client_id][key], value), key


# ===================================================================== interpolation
def test_interpolation_corners_are_the_shared_and_the_private_model(aabb_run):
    _, data, run_dir = aabb_run
    rows = interpolation_grid(load_finished_run(run_dir), step=0.5,
                              batch_size=2)  # 15 test samples: 7 batches of 2 + 1
    assert [(r["alpha"], r["beta"]) for r in rows][:3] == [(0.0, 0.0), (0.0, 0.5), (0.0, 1.0)]
    table = {(r["alpha"], r["beta"]): r["accuracy"] for r in rows}
    last = read_metrics(run_dir)[-1]
    assert table[(1.0, 1.0)] == pytest.approx(float(last["shared_path_accuracy"]), abs=1e-12)
    assert table[(0.0, 0.0)] == pytest.approx(float(last["private_path_accuracy"]), abs=1e-12)

    # the same corners computed by hand from the global and the private models
    model = make(way="AaBb").eval()
    checkpoint = torch.load(run_dir / "checkpoints/last.ckpt", weights_only=False)
    correct = [0, 0]
    for client_id in range(data.num_clients):
        shared = checkpoint["server"]["global_state"]
        model.load_state_dict({**shared, **checkpoint["client_states"][client_id]})
        x, y = data.client_test(client_id)
        with torch.no_grad():
            correct[0] += int((model.global_forward(x).argmax(-1) == y).sum())
            private = model.private["b"](model.private["a"](x))
            correct[1] += int((private.argmax(-1) == y).sum())
    total = sum(len(data.client_test(i)[1]) for i in range(data.num_clients))
    assert table[(1.0, 1.0)] == correct[0] / total and table[(0.0, 0.0)] == correct[1] / total


def test_interpolation_refuses_other_models_and_bad_steps():
    with pytest.raises(ValueError, match="two-branch model.*'ABb'"):
        interpolation_grid(SimpleNamespace(model=make(way="ABb")))
    with pytest.raises(ValueError, match="divide 1.*0.3"):
        grid_values(0.3)
    assert grid_values(0.1) == [i / 10 for i in range(11)]


def test_interpolation_cli_reads_a_cli_run_folder(tmp_path, capsys):
    from fedlight.analysis.interpolation import main as interpolate_main
    from fedlight.cli import main as fedlight_main

    fedlight_main([
        "fit", "--model", "Privatize", "--model.init_args.way", "AaBb",
        "--model.init_args.backbone", "mlp", "--data.source", "Synthetic",
        "--data.source.samples", "200", "--data.source.shape", "[1, 8, 8]",
        "--data.source.classes", "4", "--data.num_clients", "3", "--data.partition", "IID",
        "--trainer.rounds", "1", "--trainer.progress_bar", "false", "--trainer.accelerator",
        "cpu", "--trainer.default_root_dir", str(tmp_path), "--trainer.run_name", "cli"])
    interpolate_main([str(tmp_path / "cli"), "--step", "0.5"])
    assert (tmp_path / "cli/interpolation.csv").is_file()
    assert (tmp_path / "cli/interpolation.png").is_file()
    assert "alpha=beta=1 (shared model)" in capsys.readouterr().out


# ===================================================================== Auto*
def test_autosa_coefficients_are_a_softmax_and_receive_gradients():
    client = make(AutoSA)
    a, b = client.coefficients()
    torch.testing.assert_close(a, torch.full((1, 2), 0.5))
    torch.testing.assert_close(b, torch.full((2,), 0.5))
    client.alpha.data = torch.tensor([[2.0, -1.0]])
    a, _ = client.coefficients()
    torch.testing.assert_close(a.sum(-1), torch.ones(1))
    assert a[0, 0].item() == pytest.approx(math.exp(1) / (math.exp(1) + math.exp(-0.5)))
    client.training_step((X, Y), 0).backward()
    assert client.alpha.grad.abs().sum() > 0 and client.beta.grad.abs().sum() > 0
    assert {"alpha", "beta"} <= set(client.upload().state)  # psi is shared


def test_autocs_mixes_each_feature_with_its_own_pair():
    client = make(AutoCS).eval()
    assert client.alpha.shape == (2, 2)
    client.alpha.data = torch.tensor([[4.0, 0.0], [0.0, 4.0]])
    client.beta.data = torch.tensor([1.0, -1.0])
    a, b = F.softmax(client.alpha / 2, -1), F.softmax(client.beta / 2, -1)
    hs, hp = client.model.encoder(X), client.private["a"](X)
    expected = (b[0] * client.model.head(a[0, 0] * hs + a[0, 1] * hp)
                + b[1] * client.private["b"](a[1, 0] * hs + a[1, 1] * hp))
    torch.testing.assert_close(client(X), expected)
    assert client.has_global_model


def test_autohs_samples_gumbel_coefficients_only_while_training():
    client = make(AutoHS, hard=False)
    client.noise.reseed(3)
    sampled = [client.coefficients(sample=True)[0] for _ in range(3)]
    assert not torch.equal(sampled[0], sampled[1])
    assert all(torch.allclose(s.sum(-1), torch.ones(1)) for s in sampled)
    client.eval()
    torch.testing.assert_close(client(X), client(X))


def test_auto_run_logs_the_coefficient_curves(tmp_path):
    tiny_trainer(tmp_path, rounds=1, run_name="cs", weighting="uniform").fit(make(AutoCS),
                                                                             tiny_data())
    rows = read_metrics(tmp_path / "cs")
    for name in ("a00", "a01", "a10", "a11", "b0", "b1"):
        assert 0 < float(rows[-1][f"train/coef/{name}"]) < 1
    assert float(rows[-1]["train/coef/b0"]) + float(rows[-1]["train/coef/b1"]) == \
        pytest.approx(1.0)
    assert rows[-1]["global_accuracy"] != ""


# ===================================================================== mutation killers
def test_interpolation_off_diagonal_corners_mix_encoder_and_classifier(aabb_run):
    # alpha weights the encoders, beta the classifiers: (1, 0) is E_s with C_p, (0, 1) E_p
    # with C_s, so a transposed grid swaps these two cells.
    _, data, run_dir = aabb_run
    rows = interpolation_grid(load_finished_run(run_dir), step=1.0)
    table = {(r["alpha"], r["beta"]): r["accuracy"] for r in rows}
    model = make(way="AaBb").eval()
    checkpoint = torch.load(run_dir / "checkpoints/last.ckpt", weights_only=False)
    correct, total = [0, 0], 0
    for client_id in range(data.num_clients):
        model.load_state_dict({**checkpoint["server"]["global_state"],
                               **checkpoint["client_states"][client_id]})
        x, y = data.client_test(client_id)
        with torch.no_grad():
            correct[0] += int((model.private["b"](model.model.encoder(x)).argmax(-1) == y).sum())
            correct[1] += int((model.model.head(model.private["a"](x)).argmax(-1) == y).sum())
        total += len(y)
    assert correct[0] != correct[1]
    assert table[(1.0, 0.0)] == correct[0] / total and table[(0.0, 1.0)] == correct[1] / total


def test_autosa_mixes_the_features_of_both_sides_by_hand():
    client = make(AutoSA).eval()
    client.alpha.data = torch.tensor([[3.0, -1.0]])
    client.beta.data = torch.tensor([-2.0, 1.0])
    a = torch.softmax(torch.tensor([1.5, -0.5]), 0)  # temperature 2
    b = torch.softmax(torch.tensor([-1.0, 0.5]), 0)
    hs, hp = client.model.encoder(X), client.private["a"](X)
    mixed = a[0] * hs + a[1] * hp  # the same mixture feeds both classifiers
    expected = b[0] * client.model.head(mixed) + b[1] * client.private["b"](mixed)
    torch.testing.assert_close(client(X), expected)


def test_autohs_divides_the_noisy_coefficients_by_the_temperature():
    client = make(AutoHS, temperature=3.0, hard=False)
    client.alpha.data = torch.tensor([[1.0, -2.0]])
    client.beta.data = torch.tensor([0.5, 0.0])
    client.noise.reseed(11)
    a, b = client.coefficients(sample=True)
    client.noise.reseed(11)  # the same Gumbel draws: alpha's, then beta's
    g = [client.noise.gumbel_like(client.alpha.detach()),
         client.noise.gumbel_like(client.beta.detach())]
    torch.testing.assert_close(a, F.softmax((client.alpha.detach() + g[0]) / 3.0, -1))
    torch.testing.assert_close(b, F.softmax((client.beta.detach() + g[1]) / 3.0, -1))


def test_autohs_hard_selects_one_hot_forward_with_the_softmax_gradient():
    client = make(AutoHS)
    assert client.hard
    client.alpha.data = torch.tensor([[0.3, -0.2]])
    client.beta.data = torch.tensor([-0.1, 0.4])
    client.noise.reseed(5)
    a, b = client.coefficients(sample=True)
    assert set(a.flatten().tolist()) == {0.0, 1.0} and set(b.tolist()) == {0.0, 1.0}
    client.noise.reseed(5)
    g = [client.noise.gumbel_like(client.alpha.detach()),
         client.noise.gumbel_like(client.beta.detach())]
    soft_a = F.softmax(client.alpha.detach() + g[0], -1)  # temperature 1, not 2
    assert torch.equal(a, F.one_hot(soft_a.argmax(-1), 2).float())
    (a * torch.tensor([[1.0, 3.0]])).sum().backward()
    alpha = client.alpha.detach().clone().requires_grad_()
    (F.softmax(alpha + g[0], -1) * torch.tensor([[1.0, 3.0]])).sum().backward()
    torch.testing.assert_close(client.alpha.grad, alpha.grad)
    client.eval()  # evaluation: the argmax of the noise-free coefficients
    a, b = client.coefficients(sample=False)
    assert a.tolist() == [[1.0, 0.0]] and b.tolist() == [0.0, 1.0]
    hs = client.model.encoder(X)
    torch.testing.assert_close(client(X), client.private["b"](hs))
    probabilities = client.probabilities()
    torch.testing.assert_close(probabilities[0], F.softmax(client.alpha, -1))


def test_auto_private_path_loss_adds_the_pure_private_cross_entropy():
    x, y = X, Y
    plain, extra = make(AutoSA), make(AutoSA, private_path_loss=True)
    private = F.cross_entropy(extra.private["b"](extra.private["a"](x)), y)
    difference = extra.training_step((x, y), 0) - plain.training_step((x, y), 0)
    torch.testing.assert_close(difference, private)
    both = make(AutoSA, private_path_loss=True, shared_path_loss=True)
    shared = F.cross_entropy(both.global_forward(x), y)
    torch.testing.assert_close(both.training_step((x, y), 0) - plain.training_step((x, y), 0),
                               private + shared)


def test_auto_coefficients_get_their_own_learning_rate():
    client = make(AutoCS, coef_lr_scale=10.0)
    groups = client.configure_optimizers().param_groups
    assert [g["lr"] for g in groups] == [0.1, pytest.approx(1.0)]
    assert groups[1]["params"][0] is client.alpha and groups[1]["params"][1] is client.beta
    assert len(groups[0]["params"]) + 2 == len(list(client.parameters()))
    assert len(make(AutoCS).configure_optimizers().param_groups) == 1
    with pytest.raises(ValueError, match="coef_lr_scale must be positive, got 0"):
        make(AutoSA, coef_lr_scale=0)


def test_privatization_family_scores_after_local_training_by_default():
    assert make(way="Ab").evaluate_after_local_training
    assert make(AutoSA).evaluate_after_local_training
    assert not make(way="Ab", evaluate_after_training=False).evaluate_after_local_training


def test_autohs_trains_on_sampled_coefficients_and_logs_the_loss():
    client = make(AutoHS, hard=False)
    client.alpha.data = torch.tensor([[0.5, -0.5]])
    client.capture_logs(True)
    client.train()
    client.noise.reseed(9)
    loss = client.training_step((X, Y), 0)
    client.noise.reseed(9)
    sampled = F.cross_entropy(client.fused_logits(X, sample=True), Y)
    torch.testing.assert_close(loss, sampled)
    assert not torch.allclose(loss, F.cross_entropy(client.fused_logits(X, sample=False), Y))
    assert {"train_loss", "coef/a0", "coef/b1"} <= set(client.pop_federated_logs())


# ===================================================================== the authors' forms
def _two_batches():
    generator = torch.Generator().manual_seed(4)
    return [(torch.randn(6, 1, 8, 8, generator=generator), torch.randint(4, (6,),
                                                                          generator=generator))
            for _ in range(2)]


def test_auto_shared_path_step_is_a_second_optimizer_step_on_the_shared_path():
    from lightning.fabric import Fabric

    from fedlight.core.client import Phase
    from fedlight.federation.training_loop import TrainingLoop

    batches, clip = _two_batches(), 0.5
    trained = {}
    for step in (True, False):
        client = make(AutoSA, shared_path_step=step, momentum=0.9, weight_decay=1e-3)
        loop = TrainingLoop(Fabric(accelerator="cpu", devices=1), 6, gradient_clip_val=clip)
        loop.run_phase(client, Phase("train", 1), lambda: iter(batches))
        trained[step] = client.state_dict()
    reference = make(AutoSA, momentum=0.9, weight_decay=1e-3)
    optimizer = reference.configure_optimizers()
    for x, y in batches:  # the authors' order: the fused step, then the shared-path step
        for shared_path in (False, True):
            optimizer.zero_grad(set_to_none=True)
            loss = (F.cross_entropy(reference.global_forward(x), y) if shared_path
                    else reference.training_step((x, y), 0))
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for p in reference.parameters()
                                            if p.grad is not None], clip)
            optimizer.step()
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(trained[True][key], value, msg=key)
    assert not torch.allclose(trained[False]["model.head.weight"], reference.model.head.weight)
    with pytest.raises(ValueError, match="shared_path_loss and shared_path_step"):
        make(AutoSA, shared_path_step=True, shared_path_loss=True)


def test_autocs_authors_outputs_are_two_fused_outputs_each_with_its_cross_entropy():
    client = make(AutoCS, fuse_outputs="authors", temperature=1.0)
    assert client.beta.shape == (2, 2)
    client.alpha.data = torch.tensor([[1.0, -1.0], [0.0, 2.0]])
    client.beta.data = torch.tensor([[0.5, 0.0], [-1.0, 1.0]])
    a, b = F.softmax(client.alpha, -1), F.softmax(client.beta, -1)
    hs, hp = client.model.encoder(X), client.private["a"](X)
    os_, op = client.model.head(a[0, 0] * hs + a[0, 1] * hp), client.private["b"](
        a[1, 0] * hs + a[1, 1] * hp)
    first, second = b[0, 0] * os_ + b[0, 1] * op, b[1, 0] * os_ + b[1, 1] * op
    torch.testing.assert_close(client.training_step((X, Y), 0),
                               F.cross_entropy(first, Y) + F.cross_entropy(second, Y))
    mean = (F.softmax(first, -1) + F.softmax(second, -1)) / 2
    torch.testing.assert_close(client.eval()(X), mean.log())
    with pytest.raises(ValueError, match="unknown fuse_outputs 'code'; valid: paper, authors"):
        make(AutoCS, fuse_outputs="code")


def test_autosa_authors_outputs_count_the_one_fused_output_twice():
    paper, authors = make(AutoSA, temperature=1.0), make(AutoSA, temperature=1.0,
                                                         fuse_outputs="authors")
    assert authors.beta.shape == (1, 2)
    torch.testing.assert_close(authors.training_step((X, Y), 0),
                               2 * paper.training_step((X, Y), 0))
    torch.testing.assert_close(authors.eval()(X), F.log_softmax(paper.eval()(X), -1))


def test_autohs_samples_at_evaluation_only_when_asked():
    client = make(AutoHS, sample_at_evaluation=True).eval()
    client.alpha.data = torch.tensor([[0.3, -0.2]])
    client.noise.reseed(2)
    scored = client(X)
    client.noise.reseed(2)
    a, b = client.coefficients(sample=True)
    hs, hp = client.model.encoder(X), client.private["a"](X)
    mixed = a[0, 0] * hs + a[0, 1] * hp
    torch.testing.assert_close(scored, b[0] * client.model.head(mixed)
                               + b[1] * client.private["b"](mixed))
    outputs = {tuple(client(X).argmax(-1).tolist()) for _ in range(8)}
    assert len(outputs) > 1  # a fresh selection at every forward
    deterministic = make(AutoHS).eval()
    torch.testing.assert_close(deterministic(X), deterministic(X))


def test_only_an_auto_client_with_the_shared_path_step_leaves_the_batched_engine():
    from fedlight.federation.engines.batched import batching_refusal

    assert batching_refusal(make(AutoSA), "32-true", "fresh", None) is None
    refusal = batching_refusal(make(AutoSA, shared_path_step=True), "32-true", "fresh", None)
    assert refusal is not None and "loop hook" in refusal


def test_autosa_one_pair_feeds_both_classifiers_one_tensor_as_the_authors_code():
    # bit for bit the graph of the authors' AutoPSNet (one mixed feature, its output twice),
    # so that fedlight's rounds repeat the code's to the last bit
    client = make(AutoSA, temperature=1.0, fuse_outputs="authors")
    client.alpha.data = torch.tensor([[0.7, -0.4]])
    client.beta.data = torch.tensor([[0.2, 0.5]])
    client.training_step((X, Y), 0).backward()
    ours = {n: p.grad.clone() for n, p in client.named_parameters()}
    client.zero_grad()
    a, b = client.alpha.softmax(-1)[0], client.beta.softmax(-1)[0]
    mixed = a[0] * client.model.encoder(X) + a[1] * client.private["a"](X)
    output = b[0] * client.model.head(mixed) + b[1] * client.private["b"](mixed)
    (F.cross_entropy(output, Y) + F.cross_entropy(output, Y)).backward()
    for name, param in client.named_parameters():
        assert torch.equal(ours[name], param.grad), name
