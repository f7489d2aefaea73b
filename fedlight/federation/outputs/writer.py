"""The run's outputs as the trainer sees them: the folder (fresh or resumed), its header, one
row per evaluated round (CSV + loggers + progress), checkpoints, and the closing summary.
Only rank 0 writes; the other ranks hold a silent folder with the same path."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedlight.clients.base import FederatedClient
from fedlight.core.messages import SIMULATOR, Score
from fedlight.data.datamodule import FederatedDataModule
from fedlight.federation.outputs.checkpoints import LAST, find_checkpoint, save_checkpoint
from fedlight.federation.outputs.folder import RunFolder, SilentRunFolder
from fedlight.federation.outputs.progress import RoundProgress, final_table
from fedlight.federation.outputs.summary import MEAN_LAST_ROUNDS, plot_curves, summarize
from fedlight.federation.processes.collectives import Distributed
from fedlight.version import __version__


class RunWriter:
    """Opens, fills and closes one run folder.

    Args:
        dist: this process's place in the run (rank 0 writes).
        root: ``default_root_dir``.
        run_name: the folder's base name.
        loggers: logger names (``csv`` always).
        group: the W&B group of the run.
        wandb_project: the W&B project.
        progress_bar: show a progress bar over rounds.
        verbose: print the partition table and the final summary table.
        report_last: the summary's ``mean_last_*`` window (evaluated rounds).
        client_rows: write per_client_rounds.csv (trainer.per_client_scores).
        client_names: each client's domain or group name, where the data has them.
        wandb_labels: W&B config keys (and tags) labelling the run (a sweep's method, setting
            and seed).
    """

    def __init__(self, dist: Distributed, root: Path, run_name: str, loggers: list[str],
                 group: str, wandb_project: str, progress_bar: bool, verbose: bool,
                 report_last: int = MEAN_LAST_ROUNDS, client_rows: bool = False,
                 client_names: Sequence[str | None] | None = None,
                 wandb_labels: Mapping[str, Any] | None = None) -> None:
        self.dist = dist
        self.root, self.run_name = root, run_name
        self.loggers, self.group, self.wandb_project = loggers, group, wandb_project
        self.progress_bar, self.verbose = progress_bar, verbose
        self.report_last, self.client_rows = report_last, client_rows
        self.client_names, self.wandb_labels = client_names, wandb_labels
        self.folder: RunFolder | None = None

    # ----------------------------------------------------------------- opening
    def checkpoint_file(self, ckpt_path: str) -> Path:
        """The checkpoint ``ckpt_path`` names, found by rank 0 and known on every rank (every
        rank calls this; a missing run is a ``FileNotFoundError`` on every rank)."""
        found: Path = self.dist.from_writer(
            lambda: find_checkpoint(ckpt_path, self.root, self.run_name))
        return found

    def open(self, resume_from: Path | None, write_header: Callable[[RunFolder], None],
             hyperparameters: Mapping[str, Any]) -> RunFolder:
        """A fresh folder (``<run name>``, or ``-v2``, ``-v3``... when taken) with its header,
        or the folder of the checkpoint being resumed; its loggers started with
        ``hyperparameters`` (the run's full configuration)."""
        if not self.dist.is_writer:  # other ranks learn rank 0's folder and write nothing
            self.folder = SilentRunFolder(self.dist.broadcast(None), [], "", self.wandb_project)
            return self.folder
        path = resume_from.parent.parent if resume_from is not None else self._claim_fresh_folder()
        path = self.dist.broadcast(path)
        self.folder = RunFolder(path, self.loggers, self.group, self.wandb_project,
                                self.wandb_labels)
        if resume_from is None:
            self.folder.create()
            try:
                write_header(self.folder)
            except BaseException:
                self.folder.remove()
                raise
        self.folder.open_loggers(hyperparameters)
        return self.folder

    def open_existing(self, checkpoint_file: Path | None) -> RunFolder:
        """The folder of an evaluated checkpoint (``validate`` / ``test``), without loggers."""
        folder = RunFolder if self.dist.is_writer else SilentRunFolder
        self.folder = folder(self.dist.broadcast(checkpoint_file).parent.parent, [], "",
                             self.wandb_project)
        return self.folder

    def _claim_fresh_folder(self) -> Path:
        """Create and return the first free ``<run name>[-v<k>]`` folder. Creating is the
        check (mkdir fails on a folder that exists), so two runs started at the same instant
        never share one."""
        self.root.mkdir(parents=True, exist_ok=True)
        path, version = self.root / self.run_name, 2
        while True:
            try:
                path.mkdir()
                return path
            except FileExistsError:
                path = self.root / f"{self.run_name}-v{version}"
                version += 1

    def progress(self, rounds: int) -> RoundProgress:
        return RoundProgress(rounds, enabled=self.progress_bar and self.dist.is_writer)

    # ----------------------------------------------------------------- during the run
    @property
    def opened(self) -> RunFolder:
        """The folder :meth:`open` or :meth:`open_existing` opened."""
        if self.folder is None:
            raise RuntimeError("the run folder is not open yet")
        return self.folder

    def append(self, row: dict[str, Any],
               client_scores: Mapping[int, Mapping[str, Score]] | None = None) -> None:
        """Write an evaluated round's row and, with ``client_rows``, its clients' scores (also
        a W&B table at the round)."""
        self.opened.append_row(row)
        if self.client_rows and client_scores:
            rows = client_score_rows(row["round"], client_scores, self.client_names)
            self.opened.append_client_rows(rows)
            self.opened.loggers.log_table("per_client_scores", rows, int(row["round"]))

    def save_checkpoint(self, state: dict[str, Any], name: str = LAST) -> None:
        if self.dist.is_writer:
            save_checkpoint(state, self.opened.checkpoint_dir / name)

    # ----------------------------------------------------------------- closing
    def finish(self, history: list[dict[str, Any]], extra: Mapping[str, Any],
               per_client: list[dict[str, Any]]) -> dict[str, Any]:
        """Write ``summary.json``, ``per_client.json`` and the plot; print the final table."""
        folder = self.opened
        summary = summarize(history, {**extra, "run_dir": str(folder.path)}, self.report_last)
        if not self.dist.is_writer:
            return summary
        folder.write_json("summary.json", summary)
        folder.write_json("per_client.json", per_client)
        plot_curves(history, folder.path / "accuracy.png", folder.path.name)
        last_round = int(history[-1]["round"]) if history else 0
        folder.loggers.log_images({"accuracy": folder.path / "accuracy.png",
                                   "partition": folder.path / "partition.png"}, last_round)
        folder.loggers.log_table("per_client_accuracy", per_client, last_round)
        folder.loggers.log_summary(summary)
        if self.verbose:
            print(final_table(summary))
        return summary

    def close(self, failed: bool = False, rounds_done: int = 0) -> None:
        """Close the loggers. A run that failed before its first round completed (no round
        done, no metrics row, no checkpoint) leaves nothing worth keeping: its folder is
        removed. A run that failed or stopped later keeps everything it wrote."""
        if self.folder is None:
            return
        worthless = (failed and rounds_done == 0 and not self.folder.read_rows()
                     and not any(self.folder.checkpoint_dir.glob("*.ckpt")))
        if worthless:
            self.folder.remove()
        else:
            self.folder.close()

    def announce(self, action: str, checkpoint_file: Path | None, rounds_done: int) -> None:
        """One line naming the run and round a checkpoint resumes or evaluates."""
        if self.dist.is_writer and self.verbose and checkpoint_file is not None:
            print(f"fedlight: {action} run {checkpoint_file.parent.parent} at round "
                  f"{rounds_done} ({checkpoint_file})", flush=True)

    def report_stop(self, rounds_done: int, rounds_saved: int, resume: str) -> None:
        """One line on stderr after a stopped run: what was kept and how to resume."""
        if not self.dist.is_writer or self.folder is None or not self.folder.path.exists():
            return
        if rounds_saved:
            how = (f"checkpoint at round {rounds_saved} in {self.folder.checkpoint_dir / LAST}; "
                   f"resume with: {resume}")
        else:
            how = "no checkpoint was written yet, so it cannot be resumed"
        print(f"fedlight: stopped after round {rounds_done}; kept {self.folder.path} "
              f"(metrics.csv); {how}", file=sys.stderr, flush=True)

    def report_early_stop(self, stopped: Mapping[str, Any]) -> None:
        """One line after a callback stopped the run early: the round and why."""
        if self.dist.is_writer and self.verbose:
            print(f"fedlight: stopped early after round {stopped['round']}: {stopped['reason']}",
                  flush=True)

    def print_metrics(self, stage: str, metrics: Mapping[str, Any]) -> None:
        if self.dist.is_writer:
            print(final_table({f"{stage}_{k}": v for k, v in metrics.items()
                               if isinstance(v, float) and k.endswith("accuracy")}))


def client_score_rows(round_number: int, scores: Mapping[int, Mapping[str, Score]],
                      names: Sequence[str | None] | None = None) -> list[dict[str, Any]]:
    """One row per client of an evaluated round: round, client, its name (where ``names``
    has one), then accuracy, loss, AUC, macro-F1 and test samples of each scored model."""
    rows = []
    for client, by_model in sorted(scores.items()):
        row: dict[str, Any] = {"round": round_number, "client": client}
        if names is not None:
            row["client_name"] = names[client]
        for model, score in sorted(by_model.items()):
            row.update({f"{model}_accuracy": score.accuracy, f"{model}_loss": score.loss,
                        f"{model}_auc": score.auc, f"{model}_macro_f1": score.macro_f1,
                        f"{model}_samples": score.total})
        rows.append(row)
    return rows


def write_header(folder: RunFolder, config: str, datamodule: FederatedDataModule,
                 notes: list[str], verbose: bool) -> None:
    """A new run folder's first files: config.yaml (headed by the fedlight that wrote it, a
    YAML comment: the file still runs as ``fedlight fit -c <run>/config.yaml``) and the
    partition files; ``verbose`` prints the partition table and the notes."""
    folder.write_text("config.yaml", f"# fedlight=={__version__}\n{config}")
    datamodule.save_partition(folder.path)
    if verbose:
        print(datamodule.stats_table())
        for note in notes:
            print(note)


def default_run_name(client: FederatedClient, datamodule: FederatedDataModule, seed: int,
                     engine: str = SIMULATOR) -> str:
    """<method>-<source>-<partition>-s<seed>, lower-case method name, with -<engine> appended
    for runs whose clients are not simulated (e.g. -flower)."""
    name = (f"{type(client).__name__.lower()}-{datamodule.source.name}-"
            f"{datamodule.partition.name}-s{seed}")
    return name if engine == SIMULATOR else f"{name}-{engine}"


def to_yaml(obj: Mapping[str, Any]) -> str:
    """A plain YAML dump (tuples and paths become lists and strings)."""
    import yaml

    text: str = yaml.safe_dump(json.loads(json.dumps(obj, default=str)), sort_keys=False)
    return text


__all__ = ["RunWriter", "client_score_rows", "default_run_name", "to_yaml", "write_header"]
