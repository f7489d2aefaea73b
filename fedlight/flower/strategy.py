"""The server side as a Flower Strategy: fedlight's server rule drives every round.

Each round the strategy samples the round's clients as the simulator does (from seed and
round), sends each the rule's download (its shared state and message, per client when the rule
personalizes), folds every reply into the rule as a fedlight Report (shared state, weight,
payload) in client-id order, and ends the round with one-process collectives. On evaluated
rounds it asks every client to score its model on its local test split (or takes the scores
sent with the training replies, for methods that evaluate after local training), scores the
global model on the global test set, and writes the row to the run folder, with the same
columns as fedlight fit.

A reply that carries an error counts as a dropped client: it is not aggregated and the row's
dropped column counts it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from logging import INFO
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy
from flwr.supercore import log

from fedlight.federation.aggregate import state_bytes
from fedlight.federation.evaluation import Evaluator, Score
from fedlight.federation.local import LocalLoop
from fedlight.federation.population import Population
from fedlight.federation.run import RunWriter
from fedlight.federation.sampling import sample_clients
from fedlight.federation.server import Report, ServerRule, SingleProcess
from fedlight.flower.codec import pack, record_to_state, state_to_record, unpack, unpack_scores
from fedlight.flower.nodes import OwnedClients
from fedlight.flower.setup import FlowerRun


class FedlightStrategy(Strategy):
    """Runs rule (set up) over the SuperNodes of nodes ({fedlight client id: Flower node id}).

    Args:
        run: the parsed config.
        rule: the set-up server rule.
        nodes: which Flower node plays which fedlight client (every client must have one).
        writer: the opened run folder (rows are appended as rounds are evaluated), or None.
    """

    def __init__(self, run: FlowerRun, rule: ServerRule, nodes: dict[int, int],
                 writer: RunWriter | None = None) -> None:
        missing = sorted(set(range(run.datamodule.num_clients)) - set(nodes))
        if missing:
            raise ValueError(f"no SuperNode plays client(s) {missing}")
        trainer = run.trainer
        self.run, self.rule, self.nodes, self.writer = run, rule, nodes, writer
        self.client_of = {node: client for client, node in nodes.items()}
        dist = OwnedClients(trainer.fabric, [])  # the server holds no client's data
        population = Population(run.datamodule, dist, run.initial_private, "memory", ".",
                                trainer.rounds, trainer.join_ratio, trainer.batch_size)
        self.evaluator = Evaluator(
            trainer.fabric, dist, population, LocalLoop(trainer.fabric, trainer.batch_size),
            tuple(t.to(trainer.fabric.device) for t in run.datamodule.global_test()),
            trainer.eval_batch_size, trainer.seed)
        self.history: list[dict[str, Any]] = []
        self.totals = {"seconds": 0.0, "bytes_up": 0, "bytes_down": 0}
        self.sent: dict[int, int] = {}  # bytes sent to each client this round
        self.train_scores: dict[int, dict[str, Score]] = {}
        self.row: dict[str, Any] = {}

    # ----------------------------------------------------------------- which round is what
    def _evaluated(self, server_round: int) -> bool:
        trainer = self.run.trainer
        return server_round % trainer.eval_every == 0 or server_round == trainer.rounds

    def _scores_after_training(self, server_round: int) -> bool:
        return self._evaluated(server_round) and self.run.model.evaluate_after_local_training

    def _message(self, client_id: int, shared: dict[str, Any], kind: str,
                 task: dict[str, Any]) -> Message:
        content = RecordDict({"arrays": state_to_record(shared),
                              "task": ConfigRecord({"client-id": client_id, **task})})
        return Message(content, dst_node_id=self.nodes[client_id], message_type=kind)

    def _sender(self, reply: Message) -> int:
        """The client a reply comes from: known from the (Flower-authenticated) node that
        sent it, not from what the node claims."""
        return self.client_of[reply.metadata.src_node_id]

    # ----------------------------------------------------------------- training
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """One train message per sampled client, carrying the rule's download for it."""
        trainer, round_idx = self.run.trainer, server_round - 1
        self.started = time.perf_counter()
        self.rule.begin_round(round_idx)
        messages, self.sent = [], {}
        score = self._scores_after_training(server_round)
        for client_id in sample_clients(self.run.datamodule.num_clients, trainer.join_ratio,
                                        trainer.seed, round_idx):
            shared, message = self.rule.download(client_id)
            self.sent[client_id] = state_bytes(shared) + state_bytes(message)
            messages.append(self._message(client_id, shared, MessageType.TRAIN, {
                "round": round_idx, "message": pack(message), "score": score}))
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message],
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Fold the replies into the rule in client-id order and end the round."""
        weighting = self.run.trainer.weighting
        answered = {self._sender(reply): reply.content for reply in replies
                    if not reply.has_error()}
        loss_sum, steps, bytes_up, logs = 0.0, 0, 0, {}
        self.train_scores = {}
        for client_id in sorted(answered):
            content = answered[client_id]
            upload, stats = content["upload"], content["stats"]
            report = Report(client_id, record_to_state(content["arrays"]),
                            float(upload["weight"]) if weighting == "samples" else 1.0,
                            unpack(upload["payload"]))
            self.rule.add(report)
            bytes_up += state_bytes(report.state) + state_bytes(report.payload)
            loss_sum += float(stats["loss_sum"])
            steps += int(stats["steps"])
            for name, value in unpack(stats["logs"]).items():
                if name != "train_loss":
                    logs.setdefault(name, []).append(value)
            self.train_scores[client_id] = unpack_scores(stats["scores"])
        self.rule.end_round(SingleProcess())
        self.row = {"train_loss": loss_sum / max(steps, 1), "bytes_up": bytes_up,
                    "bytes_down": sum(self.sent.values())}
        if len(answered) < len(self.sent):
            self.row["dropped"] = len(self.sent) - len(answered)
        self.row.update({f"train/{k}": sum(v) / len(v) for k, v in logs.items()})
        self.row["seconds"] = seconds = time.perf_counter() - self.started
        self.totals["seconds"] += seconds
        self.totals["bytes_up"] += bytes_up
        self.totals["bytes_down"] += self.row["bytes_down"]
        metrics = MetricRecord({k: v for k, v in self.row.items() if isinstance(v, (int, float))})
        return state_to_record(self.rule.global_state), metrics

    # ----------------------------------------------------------------- evaluation
    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """On evaluated rounds, every client scores the model the rule would send it."""
        if not self._evaluated(server_round) or self._scores_after_training(server_round):
            return []
        return [self._message(client_id, self.rule.download(client_id)[0],
                              MessageType.EVALUATE, {"round": server_round - 1})
                for client_id in range(self.run.datamodule.num_clients)]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message],
                           ) -> MetricRecord | None:
        """Pool the clients' scores, score the global model, write the round's row."""
        if not self._evaluated(server_round):
            return None
        scores = self.train_scores if self._scores_after_training(server_round) else {
            self._sender(r): unpack_scores(r.content["stats"]["scores"])
            for r in replies if not r.has_error()}
        metrics = self.evaluator.evaluate(self.run.model, self.rule, server_round - 1, scores)
        row = {"round": server_round, **metrics, **self.row}
        row.update(self.rule.round_metrics(server_round))
        self.history.append(row)
        if self.writer is not None:
            self.writer.append(row)
        return MetricRecord({k: v for k, v in row.items() if isinstance(v, (int, float))})

    def summary(self) -> None:
        log(INFO, "\t├── fedlight method: %s, server rule: %s, clients: %d", self.run.method,
            type(self.rule).__name__, self.run.datamodule.num_clients)

    def per_client_rows(self) -> list[dict[str, Any]]:
        """Each client's last personalized accuracy, for per_client.json."""
        return self.evaluator.per_client_rows()


__all__ = ["FedlightStrategy"]
