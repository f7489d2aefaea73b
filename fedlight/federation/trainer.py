"""``FederatedTrainer``: the round loop, driven by Lightning Fabric.

One live client module per process plays every client in turn: before a client trains, the
global shared state and that client's private state are loaded into the module; afterwards its
private state is stored back as CPU tensors. Memory therefore grows with
``clients x private size``, not ``clients x model size``.

Every random draw is a pure function of ``(seed, round, client)``: which clients are sampled,
the batch order and the module's own randomness (dropout, Gumbel noise). So every method sees
the same client stream, a resumed run equals an uninterrupted one, and the result does not
depend on the order in which clients are trained.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedlight.clients.base import ClientContext, FederatedClient, Phase, Upload
from fedlight.data.datamodule import FederatedDataModule, iterate_batches
from fedlight.federation.aggregate import WEIGHTINGS, WeightedSum, state_bytes
from fedlight.federation.distributed import (
    Distributed,
    RoundGradScale,
    SilentRunFolder,
    check_scale_options,
    drop_clients,
    launch,
    make_fabric,
    needs_launch,
)
from fedlight.federation.evaluation import Score, score_outputs, summarize_clients
from fedlight.federation.outputs import (
    RunFolder,
    normalize_loggers,
    plot_curves,
    save_checkpoint,
    summarize,
)
from fedlight.federation.progress import RoundProgress, final_table
from fedlight.federation.store import ClientStore, make_store
from fedlight.privacy import client_leakage, make_client_dp, noise_generator

CHECKPOINT_VERSION = 1


def derive_seed(*parts: int) -> int:
    """A 63-bit seed that is a pure function of the integer ``parts``."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, np.uint64)[0] >> 1)


def sample_clients(num_clients: int, join_ratio: float, seed: int, round_idx: int) -> list[int]:
    """The clients of a round: ``max(1, round(join_ratio * N))`` drawn without replacement from a
    generator seeded by ``(seed, round)``, sorted."""
    count = max(1, int(round(join_ratio * num_clients)))
    if count >= num_clients:
        return list(range(num_clients))
    rng = np.random.default_rng([seed, round_idx])
    return sorted(int(c) for c in rng.choice(num_clients, size=count, replace=False))


class FederatedTrainer:
    """Runs federated training of a :class:`~fedlight.clients.FederatedClient` over a
    :class:`~fedlight.data.FederatedDataModule`.

    Args:
        rounds: communication rounds.
        join_ratio: share of clients sampled each round (1.0 = all).
        local_epochs: local epochs ``E``; a method's :meth:`local_phases` splits them.
        batch_size: local mini-batch size.
        eval_every: evaluate every this many rounds (the last round always is).
        seed: seed of client sampling, batch order and the module's randomness.
        weighting: aggregation weights, ``samples`` (sample counts) or ``uniform``.
        accelerator: Fabric accelerator (``auto``, ``cpu``, ``cuda``, ...).
        devices: Fabric devices; more than one (or ``num_nodes > 1``) runs one process per
            device, each training the sampled clients it owns (client ``i`` on rank
            ``i % world_size``); results do not depend on the number of processes (see
            :mod:`fedlight.federation.distributed`).
        num_nodes: Fabric nodes (multi-node runs are started by ``torchrun`` or SLURM).
        precision: Fabric precision: ``32-true``, ``bf16-mixed``, ``16-mixed`` (fp16 on GPU;
            Fabric falls back to bf16 on CPU), ... The local training step runs under
            ``fabric.autocast()``.
        strategy: how several processes are started: ``auto`` / ``ddp`` (re-runs the command
            per rank, for the CLI and scripts), ``ddp_spawn`` / ``ddp_fork`` (from Python:
            tests, notebooks). Always Fabric's DDP process group without the
            ``DistributedDataParallel`` wrapper (ranks train different clients).
        client_state_storage: where each client's private state lives between rounds:
            ``memory`` (CPU tensors) or ``disk`` (one sparse memory-mapped file, see
            :mod:`fedlight.federation.store`). Clients that never trained store nothing.
        client_state_dir: folder of the ``disk`` store's file (unlinked as soon as it is
            mapped); default ``default_root_dir``.
        drop_rate: share of each round's sampled clients that train but fail to report
            (PFLlib's client drop rate): their upload is not aggregated, their private state
            update is kept (the device did train). Drawn from ``(seed, round)``; at least one
            client reports. Logged as ``dropped`` when positive.
        default_root_dir: runs are written to ``<default_root_dir>/<run name>/``.
        run_name: the run folder's name; default ``<method>-<source>-<partition>-s<seed>``
            (``-v2``, ``-v3``... appended when that folder already exists).
        logger: ``csv`` (always on), plus ``tensorboard`` and / or ``wandb``.
        wandb_project: W&B project (runs are grouped by method and setting; offline when no
            API key is set).
        checkpoint_every: write ``checkpoints/last.ckpt`` every this many rounds (and at the end).
        eval_batch_size: batch size of evaluation.
        progress_bar: show a rich progress bar over rounds.
        verbose: print the partition table and the final summary table (``False`` for quiet
            sweeps from Python; the run folder is written either way).
        threads: torch intra-op threads (``None`` leaves torch's default).
        dp_clip_norm: client-level DP (DP-FedAvg, :mod:`fedlight.privacy.dp`): clip each
            upload's difference from the sent shared state to this L2 norm; ``None`` = no DP.
            Needs ``weighting: uniform``. Logs ``dp_epsilon`` and reports it in summary.json.
        dp_noise_multiplier: Gaussian noise std on the sum of clipped updates, in units of
            ``dp_clip_norm``.
        dp_delta: the ``delta`` at which ``dp_epsilon`` is reported.
        dlg_every: every this many rounds (on evaluation rounds), attack client 0's one-step
            update with DLG (:func:`fedlight.privacy.client_leakage`) and log ``dlg_psnr``.
        dlg_batches: batches attacked each time (the PSNR is their mean).
        dlg_options: more :func:`fedlight.privacy.client_leakage` options, e.g.
            ``{"surface": "model", "iterations": 300, "batch_size": 1}``.
    """

    def __init__(
        self,
        rounds: int = 100,
        join_ratio: float = 1.0,
        local_epochs: int = 1,
        batch_size: int = 10,
        eval_every: int = 1,
        seed: int = 0,
        weighting: str = "samples",
        accelerator: str = "auto",
        devices: int | str = 1,
        num_nodes: int = 1,
        precision: str = "32-true",
        strategy: str = "auto",
        client_state_storage: str = "memory",
        client_state_dir: str | None = None,
        drop_rate: float = 0.0,
        default_root_dir: str = "runs",
        run_name: str | None = None,
        logger: bool | str | list[str] = "csv",
        wandb_project: str = "fedlight",
        checkpoint_every: int = 10,
        eval_batch_size: int = 512,
        progress_bar: bool = True,
        verbose: bool = True,
        threads: int | None = None,
        dp_clip_norm: float | None = None,
        dp_noise_multiplier: float = 0.0,
        dp_delta: float = 1e-5,
        dlg_every: int | None = None,
        dlg_batches: int = 1,
        dlg_options: dict[str, Any] | None = None,
    ) -> None:
        _check_positive(rounds=rounds, local_epochs=local_epochs, batch_size=batch_size,
                        eval_every=eval_every, checkpoint_every=checkpoint_every,
                        eval_batch_size=eval_batch_size)
        if not 0 < join_ratio <= 1:
            raise ValueError(f"join_ratio must be in (0, 1], got {join_ratio}")
        if weighting not in WEIGHTINGS:
            raise ValueError(f"unknown weighting {weighting!r}; valid: {', '.join(WEIGHTINGS)}")
        self.rounds = rounds
        self.join_ratio = join_ratio
        self.local_epochs = local_epochs
        self.batch_size = batch_size
        self.eval_every = eval_every
        self.seed = seed
        self.weighting = weighting
        self.loggers = normalize_loggers(logger)
        self.wandb_project = wandb_project
        self.default_root_dir = Path(default_root_dir)
        self.run_name = run_name
        self.checkpoint_every = checkpoint_every
        self.eval_batch_size = eval_batch_size
        self.progress_bar = progress_bar
        self.verbose = verbose
        self.threads = threads
        self.dp = make_client_dp(dp_clip_norm, dp_noise_multiplier, dp_delta, weighting)
        if dlg_every is not None:
            _check_positive(dlg_every=dlg_every, dlg_batches=dlg_batches)
        self.dlg_every, self.dlg_batches = dlg_every, dlg_batches
        self.dlg_options = dict(dlg_options or {})
        check_scale_options(strategy, drop_rate, client_state_storage)
        self.client_state_storage = client_state_storage
        self.client_state_dir = client_state_dir
        self.drop_rate = drop_rate
        self.fabric = make_fabric(accelerator, devices, num_nodes, precision, strategy)
        self.run_config: str | None = None  # the resolved YAML, set by the CLI
        self.run: RunFolder | None = None
        self.history: list[dict[str, Any]] = []

    # ================================================================= public API
    def fit(self, model: FederatedClient, datamodule: FederatedDataModule,
            ckpt_path: str | None = None) -> dict[str, Any]:
        """Train for ``rounds`` rounds (from a checkpoint when ``ckpt_path`` is given: a path,
        or ``last`` for this configuration's latest run) and return the summary."""
        if needs_launch(self.fabric):  # several processes: start them, each runs fit
            return launch(self, "fit", model, datamodule, ckpt_path)
        self._prepare(model, datamodule)
        checkpoint = (self.dist.share_checkpoint(lambda: self._load_checkpoint(ckpt_path))
                      if ckpt_path else None)
        run = self._open_run(checkpoint, ckpt_path)
        try:
            summary = self._fit_rounds(checkpoint)
        except BaseException:
            if not any(run.checkpoint_dir.glob("*.ckpt")):
                run.remove()  # nothing complete to keep: leave no half-written run folder
            else:
                run.close()
            raise
        run.close()
        return summary

    def validate(self, model: FederatedClient, datamodule: FederatedDataModule,
                 ckpt_path: str | None = "last") -> dict[str, float]:
        """Evaluate a saved run's checkpoint on every client's local test split and on the global
        test set; print and return the metrics."""
        return self._evaluate_checkpoint(model, datamodule, ckpt_path, "validate")

    def test(self, model: FederatedClient, datamodule: FederatedDataModule,
             ckpt_path: str | None = "last") -> dict[str, float]:
        """Same as :meth:`validate` (clients hold a train and a test split only); writes
        ``test_metrics.json`` into the run folder."""
        return self._evaluate_checkpoint(model, datamodule, ckpt_path, "test")

    # ================================================================= set-up
    def _prepare(self, model: FederatedClient, datamodule: FederatedDataModule) -> None:
        if not isinstance(model, FederatedClient):
            raise TypeError(f"model must be a fedlight FederatedClient, got {type(model).__name__}")
        if self.threads:
            torch.set_num_threads(self.threads)
        datamodule.setup("fit")
        if model.num_classes != datamodule.num_classes:
            raise ValueError(f"model has {model.num_classes} classes but data source "
                             f"{datamodule.source!r} has {datamodule.num_classes}")
        self.client = model
        self.datamodule = datamodule
        self.num_clients = datamodule.num_clients
        _ = model.partition  # resolve and check the shared / private patterns now
        self.dist = Distributed(self.fabric)
        self.grad_scale = RoundGradScale(self.fabric)
        self.module = self.fabric.setup_module(model)
        device = self.fabric.device
        # Each process holds the data of the clients it owns (all of them with one process).
        self.train_data = [tuple(t.to(device) for t in datamodule.client_train(i))
                           if self.dist.owns(i) else None for i in range(self.num_clients)]
        self.test_data = [tuple(t.to(device) for t in datamodule.client_test(i))
                          if self.dist.owns(i) else None for i in range(self.num_clients)]
        self.global_test = tuple(t.to(device) for t in datamodule.global_test())
        self.class_counts = [datamodule.class_counts(i) for i in range(self.num_clients)]
        state = model.state_dict()
        self.global_state = {k: state[k].detach().clone() for k in model.partition.shared}
        self.initial_private = model.client_state()
        # Every process starts from rank 0's initial model, however it was built.
        self.global_state = self.dist.broadcast(self.global_state, device)
        self.initial_private = self.dist.broadcast(self.initial_private)
        self.client_states: ClientStore = make_store(
            self.client_state_storage, self.initial_private, self.num_clients,
            self.client_state_dir or self.default_root_dir)
        self.participations = [0] * self.num_clients
        self.message: dict[str, Any] = {}
        self.history = []
        self.round_seconds: list[float] = []  # train + aggregate time of each round run here
        self.totals = {"seconds": 0.0, "bytes_up": 0, "bytes_down": 0}

    def _default_run_name(self) -> str:
        data = self.datamodule
        return f"{type(self.client).__name__.lower()}-{data.source}-{data.partition}-s{self.seed}"

    def _open_run(self, checkpoint: dict[str, Any] | None, ckpt_path: str | None) -> RunFolder:
        if not self.dist.is_writer:  # other ranks learn rank 0's folder and write nothing
            self.run = SilentRunFolder(self.dist.broadcast(None), [], "", self.wandb_project)
            return self.run
        if checkpoint is not None:
            path = Path(self._checkpoint_file(ckpt_path)).parent.parent
        else:
            path = self._fresh_run_path()
        path = self.dist.broadcast(path)
        method = type(self.client).__name__
        group = f"{method}-{self.datamodule.source}-{self.datamodule.partition}"
        self.run = RunFolder(path, self.loggers, group, self.wandb_project)
        if checkpoint is None:
            self.run.create()
            try:
                self._write_run_header()
            except BaseException:
                self.run.remove()
                raise
        self.run.open_loggers(self._hyperparameters())
        return self.run

    def _fresh_run_path(self) -> Path:
        base = self.run_name or self._default_run_name()
        path = self.default_root_dir / base
        version = 2
        while path.exists():
            path = self.default_root_dir / f"{base}-v{version}"
            version += 1
        return path

    def _write_run_header(self) -> None:
        assert self.run is not None
        self.run.write_text("config.yaml", self.run_config or _yaml(self._hyperparameters()))
        self.datamodule.save_partition(self.run.path)
        if self.verbose:
            print(self.datamodule.stats_table())

    def _hyperparameters(self) -> dict[str, Any]:
        return {
            "method": type(self.client).__name__,
            "model": dict(self.client.hparams),
            "data": dict(self.datamodule.hparams),
            "trainer": {k: getattr(self, k) for k in (
                "rounds", "join_ratio", "local_epochs", "batch_size", "eval_every", "seed",
                "weighting", "drop_rate")},
        }

    # ================================================================= the round loop
    def _fit_rounds(self, checkpoint: dict[str, Any] | None) -> dict[str, Any]:
        assert self.run is not None
        start_round = self._restore(checkpoint) if checkpoint else 0
        progress = RoundProgress(self.rounds, enabled=self.progress_bar and self.dist.is_writer)
        with progress:
            progress.advance_to(start_round)
            for round_idx in range(start_round, self.rounds):
                row = self._run_round(round_idx)
                if row is not None:
                    self.history.append(row)
                    self.run.append_row(row)
                progress.update(round_idx + 1, self.history[-1] if self.history else {})
                if (round_idx + 1) % self.checkpoint_every == 0 or round_idx + 1 == self.rounds:
                    self._save_checkpoint(round_idx + 1)
        return self._finish()

    def _run_round(self, round_idx: int) -> dict[str, Any] | None:
        evaluate = (round_idx + 1) % self.eval_every == 0 or round_idx + 1 == self.rounds
        participants = sample_clients(self.num_clients, self.join_ratio, self.seed, round_idx)
        dropped = set(drop_clients(participants, self.drop_rate, self.seed, round_idx))
        started = time.perf_counter()
        total = (self.dp.accumulator(self.global_state, noise_generator(self.seed, round_idx))
                 if self.dp else WeightedSum())
        payloads: list[dict[str, Any]] = []
        weights: list[float] = []
        train_loss = torch.zeros((), device=self.fabric.device)
        train_steps = 0
        logs: dict[str, list[Tensor]] = {}
        after_training_scores: dict[int, dict[str, Score]] = {}
        bytes_down = state_bytes(self.global_state) + state_bytes(self.message)
        bytes_up = 0
        reports: dict[int, dict[str, Any]] = {}  # what each reporting client sent, by id
        for client_id in self.dist.owned(participants):  # all of them with one process
            upload, loss_sum, steps = self._train_client(client_id, round_idx)
            weight = upload.weight if self.weighting == "samples" else 1.0
            client_logs = self.client.pop_federated_logs()
            if client_id not in dropped:  # a dropped client trained but never reports
                total.add(upload.state, weight)
                reports[client_id] = {
                    "payload": upload.payload, "weight": weight, "loss": loss_sum,
                    "steps": steps, "logs": client_logs,
                    "bytes": state_bytes(upload.state) + state_bytes(upload.payload)}
            if evaluate and self.client.evaluate_after_local_training:
                after_training_scores[client_id] = self._score_client(client_id, load=False)
        self.dist.reduce_sum(total)  # sums across processes; the rest in client-id order:
        for report in self.dist.gather_by_client(reports).values():
            payloads.append(report["payload"])
            weights.append(report["weight"])
            bytes_up += report["bytes"]
            train_loss += report["loss"]
            train_steps += report["steps"]
            for name, value in report["logs"].items():
                if name != "train_loss":  # already the round's train_loss column
                    logs.setdefault(name, []).append(value)
        self.grad_scale.end_round(self.dist)
        if total.count:
            self.global_state = total.mean()
        self.message = type(self.client).aggregate_payloads(payloads, weights)
        seconds = time.perf_counter() - started
        self.round_seconds.append(seconds)
        self.totals["seconds"] += seconds
        self.totals["bytes_up"] += bytes_up
        self.totals["bytes_down"] += bytes_down * len(participants)
        if not evaluate:
            return None
        row: dict[str, Any] = {"round": round_idx + 1}
        row.update(self._evaluate(
            after_training_scores if self.client.evaluate_after_local_training else None))
        row["train_loss"] = float(train_loss) / max(train_steps, 1)
        row["seconds"] = seconds
        row["bytes_up"] = bytes_up
        row["bytes_down"] = bytes_down * len(participants)
        if self.drop_rate:
            row["dropped"] = len(dropped)
        row.update({f"train/{k}": float(torch.stack(v).mean()) for k, v in logs.items()})
        if self.dp is not None:
            row["dp_epsilon"] = self.dp.epsilon(round_idx + 1, self.join_ratio)
        if self.dlg_every and (round_idx + 1) % self.dlg_every == 0:  # client 0 is on rank 0
            row["dlg_psnr"] = self.dist.broadcast(
                self._dlg_psnr(round_idx) if self.dist.is_writer else None)
        return row

    # ================================================================= one client's local work
    def _load_client(self, client_id: int) -> None:
        private = self.client_states.get(client_id, self.initial_private)
        self.client.load_state_dict({**self.global_state, **private}, strict=True)

    def _train_client(self, client_id: int, round_idx: int) -> tuple[Upload, Tensor, int]:
        client = self.client
        self._load_client(client_id)
        client.context = ClientContext(
            client_id=client_id, round=round_idx, rounds=self.rounds, join_ratio=self.join_ratio,
            class_counts=self.class_counts[client_id],
            participations=self.participations[client_id],
            train_data=self.train_data[client_id], batch_size=self.batch_size,
        )
        seed = derive_seed(self.seed, round_idx, client_id)
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        client.train()
        client.on_round_start(round_idx, self.message)
        phases = client.local_phases(self.local_epochs)
        upload: Upload | None = None
        loss_sum = torch.zeros((), device=self.fabric.device)
        steps = 0
        self.grad_scale.begin_client()  # fp16: every client of a round starts from one scale
        for index, phase in enumerate(phases):
            phase_loss, phase_steps = self._run_phase(phase, client_id, generator)
            if not torch.isfinite(phase_loss):
                raise FloatingPointError(
                    f"non-finite training loss for client {client_id} in round {round_idx + 1}, "
                    f"phase {phase.name!r} (lr={client.lr}); lower the learning rate or check "
                    "the data"
                )
            loss_sum += phase_loss
            steps += phase_steps
            if phase.upload_after or (upload is None and index == len(phases) - 1):
                upload = upload or client.upload()
        assert upload is not None, "a local schedule needs at least one phase"
        self.grad_scale.end_client()
        client.on_round_end()
        self.participations[client_id] += 1
        self.client_states[client_id] = client.client_state()
        return upload, loss_sum, steps

    def _dlg_psnr(self, round_idx: int) -> float:
        """DLG leakage (PSNR, dB) of client 0 loaded as it would be for the next round."""
        self._load_client(0)
        self.client.context = ClientContext(
            client_id=0, round=round_idx + 1, rounds=self.rounds, join_ratio=self.join_ratio,
            class_counts=self.class_counts[0], participations=self.participations[0],
            train_data=self.train_data[0], batch_size=self.batch_size,
        )
        self.client.train()
        self.client.on_round_start(round_idx + 1, self.message)
        return client_leakage(self.client, self.train_data[0], self.dlg_batches,
                              seed=derive_seed(self.seed, round_idx, 0), **self.dlg_options)

    def _run_phase(self, phase: Phase, client_id: int, generator: torch.Generator
                   ) -> tuple[Tensor, int]:
        client = self.client
        client.phase = phase.name
        x, y = self.train_data[client_id]
        loss_sum = torch.zeros((), device=self.fabric.device)
        steps = 0
        with _only_trainable(client, phase.trainable):
            optimizer = _as_optimizer(client.configure_optimizers())
            for group in optimizer.param_groups:
                group["lr"] *= phase.lr_scale
            optimizer = self.fabric.setup_optimizers(optimizer)
            for _ in range(phase.epochs):
                for xb, yb in iterate_batches(x, y, self.batch_size, generator):
                    with self.fabric.autocast():  # a direct training_step call bypasses it
                        output = self.module.training_step((xb, yb), steps)
                    loss = output["loss"] if isinstance(output, dict) else output
                    self.fabric.backward(loss)
                    # fp16: the hook sees unscaled gradients (no-op for other precisions)
                    self.fabric.strategy.precision.unscale_gradients(optimizer.optimizer)
                    client.on_before_optimizer_step(optimizer)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    loss_sum += loss.detach().float()
                    steps += 1
        return loss_sum, steps

    # ================================================================= evaluation
    def _score_client(self, client_id: int, load: bool = True) -> dict[str, Score]:
        if load:
            self._load_client(client_id)
        self.client.context = ClientContext(client_id, 0, self.rounds, self.join_ratio,
                                            self.class_counts[client_id],
                                            self.participations[client_id])
        self.client.eval()
        x, y = self.test_data[client_id]
        with self.fabric.autocast():
            return score_outputs(self.client.eval_outputs, x, y, self.eval_batch_size)

    def _evaluate(self, after_training: dict[int, dict[str, Score]] | None) -> dict[str, Any]:
        """Global accuracy (global model on the global test set) and personalized accuracy with
        its spread across clients (each client's model on its local test split)."""
        metrics: dict[str, Any] = {"global_accuracy": None, "global_loss": None}
        if self.client.has_global_model and self.dist.is_writer:  # rank 0 scores the global
            self.client.load_state_dict({**self.global_state, **self.initial_private})
            self.client.eval()
            with self.fabric.autocast():
                score = score_outputs(lambda x: {"global": self.client.global_forward(x)},
                                      *self.global_test, self.eval_batch_size)["global"]
            metrics.update(global_accuracy=score.accuracy, global_loss=score.loss)
        metrics = self.dist.broadcast(metrics)
        if after_training is None:  # each process scores the clients it owns
            after_training = {i: self._score_client(i)
                              for i in self.dist.owned(range(self.num_clients))}
        scores = self.dist.gather_by_client(after_training)  # ordered by client id
        self.last_client_scores = scores
        metrics.update(summarize_clients(scores))
        return metrics

    # ================================================================= checkpoints
    def _checkpoint_file(self, ckpt_path: str | None) -> Path:
        if ckpt_path and ckpt_path != "last":
            path = Path(ckpt_path)
            if not path.is_file():
                raise FileNotFoundError(f"checkpoint {ckpt_path!r} does not exist")
            return path
        base = self.run_name or self._default_run_name()
        candidates = sorted(self.default_root_dir.glob(f"{base}*/checkpoints/last.ckpt"),
                            key=lambda p: p.stat().st_mtime)
        if not candidates:
            raise FileNotFoundError(
                f"ckpt_path='last' but no run named {base!r} with checkpoints/last.ckpt exists "
                f"under {str(self.default_root_dir)!r}; pass a checkpoint path or run fit first"
            )
        return candidates[-1]

    def _load_checkpoint(self, ckpt_path: str | None) -> dict[str, Any]:
        checkpoint = torch.load(self._checkpoint_file(ckpt_path), map_location="cpu",
                                weights_only=False)
        if checkpoint.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"checkpoint version {checkpoint.get('version')} is not "
                             f"supported (expected {CHECKPOINT_VERSION})")
        return checkpoint

    def _save_checkpoint(self, rounds_done: int) -> None:
        assert self.run is not None
        device = torch.device("cpu")
        client_states = self.dist.gather_client_states(self.client_states.state())
        participations = self.dist.merge_participations(self.participations)
        if not self.dist.is_writer:
            return
        save_checkpoint({
            "version": CHECKPOINT_VERSION,
            "rounds_done": rounds_done,
            "global_state": {k: v.to(device) for k, v in self.global_state.items()},
            "initial_private": self.initial_private,
            "client_states": client_states,
            "participations": participations,
            "grad_scale": self.grad_scale.value,
            "message": _to_device(self.message, device),
            "history": self.history,
            "totals": self.totals,
            "method": type(self.client).__name__,
        }, self.run.checkpoint_dir / "last.ckpt")

    def _restore(self, checkpoint: dict[str, Any]) -> int:
        assert self.run is not None
        method = type(self.client).__name__
        if checkpoint["method"] != method:
            raise ValueError(f"checkpoint was written by {checkpoint['method']}, not {method}")
        device = self.fabric.device
        self.global_state = {k: v.to(device) for k, v in checkpoint["global_state"].items()}
        self.initial_private = checkpoint["initial_private"]
        self.client_states.load(checkpoint["client_states"])  # this process's clients
        self.participations = list(checkpoint["participations"])
        self.grad_scale.load(checkpoint.get("grad_scale"))
        self.message = _to_device(checkpoint["message"], device)
        self.history = list(checkpoint["history"])
        self.totals = dict(checkpoint["totals"])
        self.run.write_history(self.history)
        return int(checkpoint["rounds_done"])

    # ================================================================= the end
    def _finish(self) -> dict[str, Any]:
        assert self.run is not None
        summary = summarize(self.history, {
            "method": type(self.client).__name__,
            "rounds": self.history[-1]["round"] if self.history else 0,
            "num_clients": self.num_clients,
            "seconds": self.totals["seconds"],
            "bytes_up": self.totals["bytes_up"],
            "bytes_down": self.totals["bytes_down"],
            "run_dir": str(self.run.path),
            **(self.dp.summary(self.rounds, self.join_ratio) if self.dp else {}),
        })
        if not self.dist.is_writer:
            return summary
        self.run.write_json("summary.json", summary)
        per_client = self._per_client_rows()
        self.run.write_json("per_client.json", per_client)
        plot_curves(self.history, self.run.path / "accuracy.png", self.run.path.name)
        self.run.log_images({"accuracy": self.run.path / "accuracy.png",
                             "partition": self.run.path / "partition.png"})
        self.run.log_table("per_client_accuracy", per_client)
        if self.verbose:
            print(final_table(summary))
        return summary

    def _per_client_rows(self) -> list[dict[str, Any]]:
        scores = getattr(self, "last_client_scores", {})
        return [{"client": i, "test_samples": s["personalized"].total,
                 "personalized_accuracy": s["personalized"].accuracy}
                for i, s in sorted(scores.items()) if "personalized" in s]

    def _evaluate_checkpoint(self, model: FederatedClient, datamodule: FederatedDataModule,
                             ckpt_path: str | None, stage: str) -> dict[str, float]:
        if needs_launch(self.fabric):  # several processes: start them, each evaluates
            return launch(self, "_evaluate_checkpoint", model, datamodule, ckpt_path, stage)
        self._prepare(model, datamodule)
        checkpoint = self.dist.share_checkpoint(lambda: self._load_checkpoint(ckpt_path or "last"))
        file = self._checkpoint_file(ckpt_path or "last") if self.dist.is_writer else None
        folder = RunFolder if self.dist.is_writer else SilentRunFolder
        self.run = folder(self.dist.broadcast(file).parent.parent, [], "", self.wandb_project)
        self._restore_states_only(checkpoint)
        metrics = self._evaluate(None)
        if self.dist.is_writer:
            print(final_table({f"{stage}_{k}": v for k, v in metrics.items()
                               if isinstance(v, float) and k.endswith("accuracy")}))
        if stage == "test":
            self.run.write_json("test_metrics.json", metrics)
        return metrics

    def _restore_states_only(self, checkpoint: dict[str, Any]) -> None:
        device = self.fabric.device
        self.global_state = {k: v.to(device) for k, v in checkpoint["global_state"].items()}
        self.initial_private = checkpoint["initial_private"]
        self.client_states.load(checkpoint["client_states"])  # this process's clients
        self.participations = list(checkpoint["participations"])


# ===================================================================== helpers
@contextlib.contextmanager
def _only_trainable(client: FederatedClient, patterns: Sequence[str] | None) -> Iterator[None]:
    """Freeze every parameter whose name matches none of ``patterns`` for the duration."""
    if patterns is None:
        yield
        return
    named = list(client.named_parameters())
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(n, pattern) for n, _ in named):
            raise ValueError(f"{type(client).__name__}: phase pattern {pattern!r} matches no "
                             "parameter")
    previous = {n: p.requires_grad for n, p in named}
    for name, param in named:
        param.requires_grad_(previous[name] and any(fnmatch.fnmatchcase(name, p) for p in patterns))
    try:
        yield
    finally:
        for name, param in named:
            param.requires_grad_(previous[name])


def _as_optimizer(configured: Any) -> torch.optim.Optimizer:
    if isinstance(configured, torch.optim.Optimizer):
        return configured
    if isinstance(configured, dict) and "optimizer" in configured:
        return configured["optimizer"]
    if isinstance(configured, (list, tuple)) and len(configured) == 1:
        return _as_optimizer(configured[0])
    raise TypeError("configure_optimizers must return one optimizer (or a dict with "
                    f"'optimizer'); got {type(configured).__name__}")


def _to_device(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_device(v, device) for v in obj)
    return obj


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")


def _yaml(obj: dict[str, Any]) -> str:
    import yaml

    # Round-trip through JSON so tuples and paths become plain YAML lists and strings.
    return yaml.safe_dump(json.loads(json.dumps(obj, default=str)), sort_keys=False)


__all__ = ["FederatedTrainer", "derive_seed", "sample_clients"]
