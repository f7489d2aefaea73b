"""Deep Leakage from Gradients as GPFL's privacy analysis uses it.

The attack of Zhu, Liu and Han, "Deep Leakage from Gradients", NeurIPS 2019 (arXiv:1906.08935),
in the form of GPFL's Sec. 3.3 (Zhang et al., ICCV 2023, arXiv:2308.10279, Eq. 12): a
semi-honest server holds the model ``Phi`` it sent to a client (the whole model, or only the
feature extractor when the head is private) and the update ``Delta`` the client sent back. It
learns a dummy input ``x~`` and a dummy output ``z~`` of ``Phi`` (logits for a whole model,
feature vectors for a feature extractor) by minimizing

    || grad_theta MSE(Phi(x~), z~) - g ||^2,    g = -Delta / eta  (the observed gradient)

where ``theta`` are the parameters of ``Phi`` the server receives updates of and ``eta`` the
local learning rate (one local SGD step gives ``Delta = -eta * grad``). The MSE surrogate is
what makes the attack method-agnostic: whatever a method's loss, the gradient of the shared
parameters of ``Phi`` only flows through ``Phi(x)``, so it is ``sum_i r_i^T dPhi(x_i)/dtheta``
for some residual ``r_i``, and the free dummy output lets ``MSE(Phi(x~), z~)`` produce any
residual. ``loss="ce"`` gives the original DLG instead (cross-entropy against the soft label
``softmax(z~)``, meaningful when ``Phi`` outputs logits).

Choices where the papers are silent, made here:

* the gradient distance is divided by ``||g||^2`` (the same minimizer as DLG's plain squared L2
  distance, but independent of the update's scale, so L-BFGS' tolerances behave for any
  learning rate);
* optimizer Adam (lr 0.1) by default: on the ReLU networks of the pFL papers DLG's L-BFGS
  (offered as ``optimizer="lbfgs"``, with a strong-Wolfe line search) stalls in poor local
  minima (measured: ~12 dB against Adam's 35-150 dB on a ReLU MLP); the best dummy seen
  (lowest distance) is returned, so a diverging run cannot return worse than it had found;
* with ``input_range=(lo, hi)`` the dummy input is ``lo + (hi - lo) * sigmoid(u)`` (the prior
  that pixels lie in a known box, as in the GPFL authors' attack code); without it the dummy
  input is unconstrained, as in DLG;
* PSNR is the mean over the images of a batch of each image's PSNR, after the recovered images
  are matched to the real ones by the assignment that maximizes that mean (the attack cannot
  know the order of a batch).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedlight.clients.base import FederatedClient
from fedlight.core.client import Phase
from fedlight.core.errors import ConfigError
from fedlight.core.seeding import derive_seed
from fedlight.federation.probes import Probe
from fedlight.federation.processes.fabric import device_fabric
from fedlight.federation.runtime import ClientRuntime
from fedlight.federation.training_loop import TrainingLoop, only_trainable

LOSSES = ("mse", "ce")
OPTIMIZERS = ("lbfgs", "adam")
SURFACES = ("encoder", "model")


def psnr(recovered: Tensor, real: Tensor, data_range: float = 1.0) -> float:
    """Peak signal-to-noise ratio in dB between batches of images on a ``data_range`` scale.

    Args:
        recovered: ``(B, ...)`` reconstructed inputs.
        real: ``(B, ...)`` true inputs, the same shape.
        data_range: the value range of the images (1.0 for images scaled to [0, 1]).

    Returns:
        ``10 log10(data_range^2 / MSE)`` for one image (``B = 1``). For ``B > 1``, the mean of
        the per-image PSNRs after matching recovered to real images by the permutation that
        maximizes that mean. ``inf`` when the images are identical.

    Raises:
        ValueError: shapes differ, a tensor has no batch dimension, or ``data_range <= 0``.
    """
    if recovered.shape != real.shape:
        raise ConfigError(f"shapes differ: recovered {tuple(recovered.shape)}, "
                         f"real {tuple(real.shape)}")
    if real.ndim < 2:
        raise ConfigError(f"psnr takes batches (B, ...), got shape {tuple(real.shape)}")
    if data_range <= 0:
        raise ConfigError(f"data_range must be positive, got {data_range}")
    a = recovered.detach().double().flatten(1).cpu()
    b = real.detach().double().flatten(1).cpu()
    mse = ((a[:, None, :] - b[None, :, :]) ** 2).mean(-1)  # (recovered, real)
    with np.errstate(divide="ignore"):
        table = 10.0 * np.log10(data_range**2 / mse.numpy())
    if len(a) == 1:
        return float(table[0, 0])
    from scipy.optimize import linear_sum_assignment

    finite = np.where(np.isinf(table), 1e6, table)  # the solver needs finite costs
    rows, cols = linear_sum_assignment(finite, maximize=True)
    return float(table[rows, cols].mean())


def dlg_attack(
    model: nn.Module,
    inputs_shape: Sequence[int],
    target_update: dict[str, Tensor],
    param_names: list[str],
    iterations: int = 300,
    lr: float = 0.1,
    seed: int = 0,
    *,
    step_lr: float = 1.0,
    loss: str = "mse",
    optimizer: str = "adam",
    input_range: tuple[float, float] | None = None,
) -> Tensor:
    """Recover the inputs behind a one-step update by gradient matching (DLG, GPFL's Eq. 12).

    Args:
        model: ``Phi``, the module the server holds with the parameters it sent (a whole model
            or a feature extractor); its ``forward`` maps an input batch to outputs.
        inputs_shape: shape of the batch to recover, ``(B, *input_shape)``.
        target_update: the observed update (uploaded minus sent parameters) by parameter name
            of ``model.named_parameters()``; at least the names in ``param_names``.
        param_names: the parameters of ``model`` whose update is matched.
        iterations: optimizer iterations (L-BFGS iterations or Adam steps).
        lr: learning rate of the attack's optimizer (0.1 suits Adam, 1.0 L-BFGS).
        seed: seeds the dummy input and output.
        step_lr: the client's learning rate ``eta``; the target gradient is
            ``-target_update / step_lr``.
        loss: ``"mse"`` (GPFL: MSE between ``Phi(x~)`` and the dummy output) or ``"ce"``
            (DLG: cross-entropy against the soft label ``softmax(z~)``).
        optimizer: ``"adam"`` or ``"lbfgs"`` (DLG's choice; on ReLU networks it stalls in
            poor local minima far more often than Adam, hence the default).
        input_range: ``(lo, hi)`` box the dummy input is kept in through a sigmoid; ``None``
            leaves it unconstrained.

    Returns:
        The recovered inputs, a detached tensor of ``inputs_shape`` on the model's device.

    Raises:
        ValueError: an unknown ``loss``/``optimizer``, ``iterations < 1``, ``lr <= 0``, or a
            parameter name missing from ``model`` or ``target_update``.
    """
    _check_choice("loss", loss, LOSSES)
    _check_choice("optimizer", optimizer, OPTIMIZERS)
    if iterations < 1:
        raise ConfigError(f"iterations must be at least 1, got {iterations}")
    if lr <= 0 or step_lr <= 0:
        raise ConfigError(f"lr and step_lr must be positive, got lr={lr}, step_lr={step_lr}")
    named = dict(model.named_parameters())
    missing = [n for n in param_names if n not in named or n not in target_update]
    if missing or not param_names:
        raise ValueError(f"parameter names {missing or param_names} are missing from the model "
                         f"or the update; model parameters: {list(named)[:8]}")
    params = [named[n] for n in param_names]
    target = [(-target_update[n] / step_lr).detach().to(p.device, p.dtype)
              for n, p in zip(param_names, params, strict=True)]
    # A zero update (e.g. every ReLU dead) carries nothing to match: the run still goes on and
    # its result is as good as a guess.
    scale = sum(float(t.pow(2).sum()) for t in target) or 1.0

    device = params[0].device
    generator = torch.Generator().manual_seed(seed)
    dummy_x = torch.randn(tuple(inputs_shape), generator=generator).to(device).requires_grad_()
    with torch.no_grad():
        out_shape = model(_to_input(dummy_x, input_range)).shape
    dummy_z = torch.randn(tuple(out_shape), generator=generator).to(device).requires_grad_()
    variables = [dummy_x, dummy_z]

    def distance() -> Tensor:
        outputs = model(_to_input(dummy_x, input_range))
        if loss == "mse":
            surrogate = F.mse_loss(outputs, dummy_z)
        else:
            surrogate = F.cross_entropy(outputs, F.softmax(dummy_z, dim=-1))
        grads = torch.autograd.grad(surrogate, params, create_graph=True, allow_unused=True)
        total = outputs.new_zeros(())
        for g, t in zip(grads, target, strict=True):
            total = total + (t.pow(2).sum() if g is None else (g - t).pow(2).sum())
        return total / scale

    best = {"value": math.inf, "x": dummy_x.detach().clone()}

    def closure() -> Tensor:
        value = distance()
        # Only the dummies get gradients: the model's own .grad fields stay untouched.
        grads = torch.autograd.grad(value, variables, allow_unused=True)
        for var, grad in zip(variables, grads, strict=True):
            var.grad = torch.zeros_like(var) if grad is None else grad
        value = value.detach()
        if torch.isfinite(value) and float(value) < best["value"]:
            best.update(value=float(value), x=dummy_x.detach().clone())
        return value

    if optimizer == "lbfgs":
        opt = torch.optim.LBFGS(variables, lr=lr, max_iter=iterations, history_size=100,
                                line_search_fn="strong_wolfe", tolerance_grad=1e-10,
                                tolerance_change=1e-12)
        opt.step(closure)
    else:
        opt = torch.optim.Adam(variables, lr=lr)
        for _ in range(iterations):
            opt.zero_grad()
            if not torch.isfinite(opt.step(closure)):
                break
    return _to_input(best["x"], input_range).detach()


def _to_input(raw: Tensor, input_range: tuple[float, float] | None) -> Tensor:
    if input_range is None:
        return raw
    lo, hi = input_range
    return lo + (hi - lo) * torch.sigmoid(raw)


def _check_choice(name: str, value: str, valid: Sequence[str]) -> None:
    if value not in valid:
        raise ConfigError(f"unknown {name} {value!r}; valid: {', '.join(valid)}")


def check_image_inputs(x: Tensor, where: str = "this data") -> None:
    """Refuse inputs that are not images: DLG's score, PSNR, is defined on float images of
    shape ``(B, C, H, W)``; token ids, signals and flat feature vectors have no such score."""
    if not x.is_floating_point() or x.ndim != 4:
        raise ConfigError(f"the DLG leakage score (PSNR) needs image inputs, float (C, H, W) per "
                         f"sample, but {where} has {str(x.dtype).replace('torch.', '')} inputs "
                         f"of shape {tuple(x.shape[1:])}; remove DLGProbe for this data")


# ===================================================================== attacking a client
def attack_surface(client: FederatedClient, surface: str) -> nn.Module:
    """The module ``Phi`` the server attacks: ``"encoder"`` (GPFL's "-fe": the backbone's
    feature extractor ``client.model.encoder``), ``"model"`` (the whole backbone,
    ``client.model``, logits out) or a surface the method names in its
    ``attack_surfaces()`` (GPFL: ``"sfe"`` and ``"sm"``, its pseudo feature extractor and
    pseudo model, Table 5), built from the client as it is loaded now."""
    offered = client.attack_surfaces()
    _check_choice("surface", surface, [*SURFACES, *offered])
    if surface in offered:
        module: nn.Module = offered[surface]
        return module
    return client.model.encoder if surface == "encoder" else client.model


def evaluate_client_leakage(
    client: FederatedClient,
    batch: tuple[Tensor, Tensor],
    surface: str | nn.Module = "encoder",
    iterations: int = 300,
    lr: float = 0.1,
    seed: int = 0,
    value_range: tuple[float, float] | None = None,
    **attack_kwargs: object,
) -> float:
    """PSNR (dB) of the DLG reconstruction of one batch from the update it causes.

    The client (as loaded for training: received shared state, its private state, its
    ``context``, ``on_round_start`` called) takes ONE local SGD step on ``batch`` with its own
    loss (``training_step``) and learning rate, in the phase that produces its upload (the phase
    with ``upload_after``, else the last) with that phase's trainable parameters and
    ``lr_scale``. Momentum and weight decay are left out: the server knows the decay and the
    parameters it sent, so it would remove that term anyway. The update of the shared
    partition restricted to ``Phi``'s parameters is attacked with :func:`dlg_attack`, and the
    reconstruction is scored against ``batch``'s inputs mapped to [0, 1]. The client's state,
    ``phase`` and logs are restored afterwards and no ``.grad`` field is written, so a trainer
    can call this mid-run.

    Args:
        client: a :class:`~fedlight.clients.FederatedClient` ready to train.
        batch: ``(x, y)`` on the client's device.
        surface: a name :func:`attack_surface` knows (``"encoder"``, ``"model"``, GPFL's
            ``"sfe"`` / ``"sm"``) or a module whose parameters are the client's own.
        iterations, lr, seed: of :func:`dlg_attack`.
        value_range: ``(lo, hi)`` of the input values (e.g. of the whole data set), mapped to
            [0, 1] for the PSNR; it also boxes the dummy input. ``None``: the batch's min and max.
        **attack_kwargs: more :func:`dlg_attack` options (``loss``, ``optimizer``,
            ``input_range``: defaults to ``value_range``).

    Returns:
        The PSNR in dB (higher = more leakage).

    Raises:
        ValueError: the inputs are not images (see :func:`check_image_inputs`), or a parameter
            of ``Phi`` is not in the shared partition (the server never receives its update).
    """
    x, y = batch
    check_image_inputs(x)
    phi = attack_surface(client, surface) if isinstance(surface, str) else surface
    names = _client_names(client, phi)
    shared = set(client.partition.shared)
    private = [client_name for client_name in names.values() if client_name not in shared]
    if private:
        raise ConfigError(f"{type(client).__name__}: the attacked module has parameters the "
                         f"server never receives ({private[:3]}); attack the shared part only")
    lo, hi = value_range if value_range is not None else (float(x.min()), float(x.max()))
    if hi <= lo:
        raise ConfigError(f"value_range must have hi > lo, got ({lo}, {hi})")
    step_lr = _one_step_lr(client)
    received = {k: v.detach().clone() for k, v in client.state_dict().items()}
    phase = client.phase
    try:
        update = _one_step_update(client, (x, y), step_lr)
    finally:
        client.load_state_dict(received)
        client.phase = phase
        client.pop_federated_logs()
    target = {phi_name: update[client_name] for phi_name, client_name in names.items()}
    attack_kwargs.setdefault("input_range", (lo, hi))
    recovered = dlg_attack(phi, tuple(x.shape), target, list(names), iterations=iterations,
                           lr=lr, seed=seed, step_lr=step_lr, **attack_kwargs)  # type: ignore[arg-type]
    span = hi - lo
    return psnr(((recovered - lo) / span).clamp(0, 1), ((x - lo) / span).clamp(0, 1))


def attacked_batches(train_data: tuple[Tensor, Tensor], batches: int, batch_size: int,
                     seed: int) -> list[tuple[Tensor, Tensor]]:
    """The batches :func:`client_leakage` attacks: ``batches`` batches of ``batch_size``
    samples of ``train_data`` drawn without replacement with a generator seeded by ``seed``
    (fewer where the data is short)."""
    if batches < 1 or batch_size < 1:
        raise ConfigError(f"batches and batch_size must be at least 1, got {batches}, {batch_size}")
    x, y = train_data
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed)).to(x.device)
    chosen = [order[i * batch_size:(i + 1) * batch_size]
              for i in range(min(batches, max(1, len(x) // batch_size)))]
    return [(x[index], y[index]) for index in chosen]


def client_leakage(
    client: FederatedClient,
    train_data: tuple[Tensor, Tensor],
    batches: int = 1,
    batch_size: int = 1,
    seed: int = 0,
    **kwargs: object,
) -> float:
    """Mean :func:`evaluate_client_leakage` PSNR over the :func:`attacked_batches` of
    ``train_data``; the ``[0, 1]`` mapping uses the min and max of the whole ``train_data``.
    ``kwargs`` go to :func:`evaluate_client_leakage`. Single-image batches (the default) are
    DLG's worst case for the client; backbones with ``BatchNorm1d`` need ``batch_size >= 2``
    in train mode."""
    x = train_data[0]
    kwargs.setdefault("value_range", (float(x.min()), float(x.max())))
    values = [evaluate_client_leakage(client, batch, seed=seed + index, **kwargs)  # type: ignore[arg-type]
              for index, batch in enumerate(attacked_batches(train_data, batches, batch_size,
                                                             seed))]
    return float(np.mean(values))


def guess_leakage(train_data: tuple[Tensor, Tensor], batches: int = 1, batch_size: int = 1,
                  seed: int = 0) -> dict[str, float]:
    """The PSNR of two data-free guesses of the images :func:`client_leakage` attacks (same
    batches, same ``[0, 1]`` mapping), the scale a leakage is read against: ``noise`` (uniform
    noise, seeded by ``seed``) and ``black`` (all zeros; dark digits already score ~10 dB)."""
    x = train_data[0]
    lo, hi = float(x.min()), float(x.max())
    real = [((batch - lo) / (hi - lo)).clamp(0, 1)
            for batch, _ in attacked_batches(train_data, batches, batch_size, seed)]
    generator = torch.Generator().manual_seed(seed)
    noise = [torch.rand(batch.shape, generator=generator).to(batch.device) for batch in real]
    return {"noise": float(np.mean([psnr(n, r) for n, r in zip(noise, real, strict=True)])),
            "black": float(np.mean([psnr(torch.zeros_like(r), r) for r in real]))}


def _client_names(client: nn.Module, phi: nn.Module) -> dict[str, str]:
    """``Phi``'s parameter names mapped to the client's state-dict names of the same tensors."""
    by_id = {id(p): n for n, p in client.named_parameters()}
    names = {}
    for name, param in phi.named_parameters():
        if id(param) not in by_id:
            raise ValueError(f"parameter {name!r} of the attacked module is not the client's")
        names[name] = by_id[id(param)]
    return names


def _upload_phase(client: FederatedClient) -> Phase:
    """The phase whose training the server sees in the upload, as the runtime chooses it."""
    phases = client.local_phases(1)
    return phases[ClientRuntime.upload_index(phases)]


def _one_step_lr(client: FederatedClient) -> float:
    return float(client.lr) * _upload_phase(client).lr_scale


def _one_step_update(client: FederatedClient, batch: tuple[Tensor, Tensor],
                     step_lr: float) -> dict[str, Tensor]:
    """Shared state after one plain SGD step on ``batch`` minus the shared state before it,
    taken by the same local loop as federated training (one batch, one step)."""
    phase = replace(_upload_phase(client), epochs=1, max_steps=1, lr_scale=1.0)
    before = client.shared_state()
    with only_trainable(client, phase.trainable):
        params = [p for p in client.parameters() if p.requires_grad]
        step = torch.optim.SGD(params, lr=step_lr)
        _loop(client).run_phase(client, phase, lambda: [batch], optimizer=step)
    after = client.shared_state()
    return {k: after[k] - before[k] for k in before if before[k].is_floating_point()}


def _loop(client: FederatedClient) -> TrainingLoop:
    """The local loop on the client's Fabric (the trainer's), or a one-device Fabric."""
    return TrainingLoop(client.fabric or device_fabric(client.device))


class DLGProbe(Probe):
    """Logs ``dlg_psnr``: the DLG leakage (PSNR, dB) of client 0's one-step update, with client
    0 loaded as it would be for the next round (:func:`client_leakage`).

    Args:
        every: attack every this many rounds (on evaluated rounds).
        batches: batches attacked each time (the PSNR is their mean).
        options: more :func:`client_leakage` options, e.g. ``{"surface": "model",
            "iterations": 300, "batch_size": 1}``; checked before training.
        surface: the attacked module, by name (see :func:`attack_surface`: ``encoder``,
            ``model``, GPFL's ``sfe`` and ``sm``); the column is then ``dlg_psnr_<surface>``,
            so one run can carry a probe per surface. ``None``: ``options``' surface (or
            ``encoder``), column ``dlg_psnr``.
        guesses: also log ``dlg_psnr_guess_noise`` and ``dlg_psnr_guess_black``, the PSNR of
            data-free guesses of the same images (:func:`guess_leakage`).
    """

    def __init__(self, every: int = 1, batches: int = 1,
                 options: dict[str, Any] | None = None, surface: str | None = None,
                 guesses: bool = False) -> None:
        if every < 1 or batches < 1:
            raise ConfigError(f"every and batches must be at least 1, got {every}, {batches}")
        self.every, self.batches = every, batches
        self.options = dict(options or {})
        valid = _leakage_options()
        unknown = sorted(set(self.options) - valid)
        if unknown:
            raise ConfigError(f"unknown DLGProbe option(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(sorted(valid))}")
        if surface is not None and "surface" in self.options:
            raise ConfigError(f"DLGProbe got surface {surface!r} and options.surface "
                             f"{self.options['surface']!r}; give one")
        self.column = "dlg_psnr" if surface is None else f"dlg_psnr_{surface}"
        if surface is not None:
            self.options["surface"] = surface
        self.guesses = guesses

    def setup(self, trainer: Any) -> None:
        """Refuse a run whose inputs are not images, or a surface its method does not
        offer, before its first round."""
        data = trainer.datamodule
        check_image_inputs(data.data.x_train[:1], f"data source {data.source.name!r}")
        surface = self.options.get("surface", "encoder")
        if isinstance(surface, str):
            attack_surface(trainer.client, surface)

    def on_round_end(self, trainer: Any, round_idx: int) -> dict[str, float]:
        if (round_idx + 1) % self.every:
            return {}
        seed = derive_seed(trainer.seed, round_idx, 0)

        def leakage() -> dict[str, float]:  # on the process that owns client 0
            client = trainer.load_client(0, round_idx + 1)
            data = trainer.population.train_data[0]
            values = {self.column: client_leakage(client, data, self.batches, seed=seed,
                                                  **self.options)}
            if self.guesses:
                batch_size = int(self.options.get("batch_size", 1))
                values.update({f"dlg_psnr_guess_{name}": value for name, value in
                               guess_leakage(data, self.batches, batch_size, seed).items()})
            return values

        values: dict[str, float] = trainer.dist.from_owner(0, leakage)
        return values


def _leakage_options() -> set[str]:
    names = set()
    for function in (client_leakage, evaluate_client_leakage, dlg_attack):
        names |= {n for n, p in inspect.signature(function).parameters.items()
                  if p.kind is inspect.Parameter.KEYWORD_ONLY or p.default is not p.empty}
    return names - {"seed", "batches", "step_lr", "value_range"} | {"value_range"}


__all__ = ["DLGProbe", "attack_surface", "attacked_batches", "check_image_inputs",
           "client_leakage", "dlg_attack", "evaluate_client_leakage", "guess_leakage", "psnr"]
