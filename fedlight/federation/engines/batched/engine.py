"""The batched engine: a round's participants trained in groups of up to K clients, each
group one vectorized computation (see the package docstring)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import replace

import torch
from torch import Tensor

from fedlight.core.messages import ClientResult, Score, State, TrainTask
from fedlight.federation.engines.batched.eligibility import padding_refusal, scoring_refusal
from fedlight.federation.engines.batched.memory import client_bytes, group_size_for
from fedlight.federation.engines.batched.planning import (
    Batch,
    PreparedClient,
    Rows,
    client_state,
    load_rows,
    phase_batches,
    schedule_signature,
)
from fedlight.federation.engines.batched.workspace import Workspace, step_capture
from fedlight.federation.engines.sequential import SequentialEngine
from fedlight.federation.engines.stacked_step import StackedOutputs
from fedlight.federation.runtime import ClientRuntime
from fedlight.federation.training_loop import check_phases, non_finite_loss


@contextlib.contextmanager
def autotuned_convolutions(device: torch.device) -> Iterator[None]:
    """Within the block, on a GPU, cuDNN times its convolution algorithms for each shape
    (``cudnn.benchmark``): a group's shapes repeat every step, and vmapped convolutions
    become grouped ones, whose fastest algorithm differs from a plain convolution's. The
    setting is put back after (the loop's shapes vary with every smaller batch); nothing
    changes elsewhere."""
    if device.type != "cuda":
        yield
        return
    previous = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = previous


def steps_note(captured: bool, padding: str | None) -> str:
    """How a batched run's steps run, for its header: with ``captured`` (CUDA graphs, see
    :func:`step_capture`) all of them from graphs, or all but those where a client has a
    smaller batch, which run eagerly, and why (``padding``: :func:`padding_refusal`);
    else eagerly."""
    if not captured:
        return "steps run eagerly"
    if padding is None:
        return "every step replayed from CUDA graphs, captured: all"
    return ("steps replayed from CUDA graphs but those where a client has a smaller batch, "
            f"which run eagerly: {padding}")


class BatchedEngine(SequentialEngine):
    """SequentialEngine training up to ``group_size`` participants at once (module docstring):
    each participant is started, drawn and finished by the client runtime, as in the loop;
    only the local steps in between are one computation for the group.

    Args:
        runtime: the client runtime of this process.
        group_size: clients per batched computation (K); None: from the device's free memory
            at the first round (all of a round's clients where they fit).
        graphs: capture the static steps in CUDA graphs (on a GPU at 32-true precision).
    """

    def __init__(self, runtime: ClientRuntime, group_size: int | None,
                 graphs: bool = True) -> None:
        super().__init__(runtime)
        self.group_size = group_size
        self.capture = step_capture(runtime.fabric, graphs)
        self.workspaces: dict[Hashable, Workspace] = {}
        self.scoring_refusal = scoring_refusal(runtime.client)
        self.scoring = None if self.scoring_refusal else StackedOutputs(runtime.client)
        #: why a client's smaller last batch is not padded (its steps then run eagerly)
        self.padding_refusal = padding_refusal(runtime.client)
        self.capture_failures: list[str] = []

    @property
    def steps_note(self) -> str:
        """How the steps run, for the run's header (:func:`steps_note`)."""
        return steps_note(self.capture is not None, self.padding_refusal)

    @property
    def captured(self) -> str:
        """Whether the steps of the groups trained so far ran from captures: ``all`` (every
        step a static one, each workspace's captured after its warm-up calls), ``partly``
        or ``none`` (the GPU benchmark's column; on a CPU only a stand-in capture, as in the
        tests, gives anything but ``none``)."""
        workspaces = list(self.workspaces.values())
        if workspaces and all(w.full.captured and not w.eager_steps for w in workspaces):
            return "all"
        return "partly" if any(w.full.replays for w in workspaces) else "none"

    def report_capture_failure(self, cause: str) -> None:
        """Say once per cause (stderr, one line) that a step could not be captured."""
        if cause in self.capture_failures:
            return
        self.capture_failures.append(cause)
        print(f"fedlight: a batched step could not be captured in a CUDA graph ({cause}); "
              "it runs eagerly", file=sys.stderr, flush=True)

    def train(self, tasks: Sequence[TrainTask]) -> Iterator[ClientResult]:
        """Train the tasks group by group, yielding results in task order."""
        pending = list(tasks)
        while pending:
            size = self.group_size or self.choose_group_size(pending)
            chunk, pending = pending[:size], pending[size:]
            prepared = [self.prepare(task) for task in chunk]
            keys: list[Hashable] = []
            for item in prepared:
                if item.key not in keys:
                    keys.append(item.key)
            for key in keys:
                self.train_group([p for p in prepared if p.key == key])
            yield from self.finish_group(prepared)

    def finish_group(self, prepared: Sequence[PreparedClient]) -> list[ClientResult]:
        """Finish each participant in task order (:meth:`finish`); those whose task asks for
        scores are scored together afterwards, each on its state after its round's end."""
        if self.scoring is None:
            return [self.finish(item) for item in prepared]
        results: list[ClientResult] = []
        scored: dict[int, Rows] = {}
        for item in prepared:
            results.append(self.finish(item, score=False))
            if item.task.score:
                scored[len(results) - 1] = self.scoring_state()
        scores = self.score_states([results[i].client_id for i in scored], list(scored.values()))
        for index, client_scores in zip(scored, scores, strict=True):
            results[index] = replace(results[index], scores=client_scores)
        return results

    def evaluate(self, round_idx: int,
                 downloads: Mapping[int, State]) -> dict[int, dict[str, Score]]:
        """Score every client of ``downloads`` (its download plus its private state), up to
        the group size at once through the vmapped ``eval_outputs``; one after another where
        :func:`scoring_refusal` says why."""
        if self.scoring is None:
            return super().evaluate(round_idx, downloads)
        runtime, ids = self.runtime, list(downloads)
        size = self.group_size or len(ids)
        scores: dict[int, dict[str, Score]] = {}
        for start in range(0, len(ids), size):
            chunk = ids[start:start + size]
            states = []
            for client_id in chunk:
                runtime.load(client_id, round_idx, downloads[client_id])
                states.append(self.scoring_state())
            scores.update(zip(chunk, self.score_states(chunk, states), strict=True))
        return scores

    def scoring_state(self) -> Rows:
        """The loaded client's parameters and buffers as it is scored (its context-derived
        buffers built first)."""
        self.runtime.client.refresh_buffers()
        return client_state(self.runtime.client)

    def score_states(self, client_ids: Sequence[int],
                     states: Sequence[Rows]) -> list[dict[str, Score]]:
        """Score the clients whose parameters and buffers are ``states`` together (the live
        module in eval mode); on running out of device memory, in halves."""
        if not client_ids:
            return []
        assert self.scoring is not None
        scoring = self.scoring
        stacked = {name: torch.stack([state[name] for state in states]) for name in states[0]}
        self.runtime.client.eval()
        try:
            with autotuned_convolutions(self.runtime.fabric.device):
                return self.runtime.score_together(client_ids,
                                                   lambda inputs: scoring(stacked, inputs))
        except torch.OutOfMemoryError:
            if len(client_ids) == 1:
                raise
            del stacked
            torch.cuda.empty_cache()
            half = len(client_ids) // 2
            return (self.score_states(client_ids[:half], states[:half])
                    + self.score_states(client_ids[half:], states[half:]))

    def choose_group_size(self, tasks: Sequence[TrainTask]) -> int:
        """K for ``group_size=None``: every task where the device's free memory holds them
        (an estimate per client: :func:`client_bytes`), kept for the run."""
        runtime = self.runtime
        device = runtime.fabric.device
        if device.type != "cuda":
            self.group_size = len(tasks)
            return self.group_size
        free, _ = torch.cuda.mem_get_info(device)
        x, _ = runtime.population.train_data[tasks[0].client_id]
        per_client = client_bytes(runtime.client, x[:runtime.loop.batch_size],
                                  x.numel() * x.element_size() * runtime.local_epochs)
        self.group_size = group_size_for(per_client, free, len(tasks))
        return self.group_size

    def prepare(self, task: TrainTask) -> PreparedClient:
        """Start a participant through the runtime (once for its round) and draw its
        batches."""
        runtime = self.runtime
        started = runtime.begin(task)
        phases = runtime.phases()
        check_phases(runtime.client, phases)
        batches: list[list[Batch]] = []
        left = runtime.loop.max_local_steps
        for phase in phases:
            batches.append(phase_batches(
                lambda: runtime.batches(task.client_id, started.generator), phase, left))
            left = None if left is None else left - len(batches[-1])
        key = (schedule_signature(phases), runtime.client.batch_key())
        return PreparedClient(started, client_state(runtime.client), phases, key, batches)

    def train_group(self, group: Sequence[PreparedClient]) -> None:
        """Train ``group`` (one key) as one computation; on running out of device memory,
        in halves (and with half the group size from then on)."""
        try:
            with autotuned_convolutions(self.runtime.fabric.device):
                self._train_group(group)
        except torch.OutOfMemoryError:
            if len(group) == 1:
                raise
            self.group_size = max(1, len(group) // 2)
            self.workspaces.clear()
            torch.cuda.empty_cache()  # does nothing where CUDA was never used
            for start in range(0, len(group), self.group_size):
                self.train_group(group[start:start + self.group_size])

    def _train_group(self, group: Sequence[PreparedClient]) -> None:
        runtime = self.runtime
        runtime.resume(group[0].started)  # the live module's Python state: a member's
        client = runtime.client
        state = {n: torch.stack([p.start[n] for p in group]) for n in group[0].start}
        after: list[Rows] = []
        losses: list[Tensor] = []
        logged: list[dict[str, tuple[Tensor, int]]] = [{} for _ in group]
        for index, phase in enumerate(group[0].phases):
            batches = [p.batches[index] for p in group]
            workspace = self.workspace(index, group, state, batches)
            client.phase = phase.name
            workspace.load(state)
            workspace.train(batches)
            state = workspace.result()
            after.append(state)
            losses.append(workspace.loss_sum.clone())
            for k, totals in enumerate(logged):
                for name, (total, count) in workspace.logged_means(k).items():
                    previous, seen = totals.get(name, (0.0, 0))
                    totals[name] = (total + previous, count + seen)
        phase_losses = torch.stack(losses)  # [phases, K]
        finite = torch.isfinite(phase_losses).cpu()  # the group's one read on the host
        for k, prepared in enumerate(group):
            if not finite[:, k].all():
                phase = group[0].phases[int((~finite[:, k]).nonzero()[0])]
                raise non_finite_loss(client, phase, (prepared.task.client_id,
                                                      prepared.task.round_idx))
            prepared.rows = [{n: v[k] for n, v in rows.items()} for rows in after]
            prepared.loss_sum = phase_losses[:, k].sum()
            prepared.steps = sum(len(b) for b in prepared.batches)
            prepared.logs = {name: total / count for name, (total, count) in logged[k].items()}

    def workspace(self, index: int, group: Sequence[PreparedClient], state: Rows,
                  batches: Sequence[Sequence[Batch]]) -> Workspace:
        """The cached workspace of phase ``index`` for this group's key and size (a new one,
        not cached, where the optimizer cannot be reset in place)."""
        sample = next((b[0] for b in batches if b), (torch.zeros(1), torch.zeros(1)))
        key = (group[0].key, index, len(group), tuple(sample[0].shape[1:]), sample[0].dtype)
        workspace = self.workspaces.get(key)
        if workspace is None:
            phase = group[0].phases[index]
            workspace = Workspace(self.runtime.client, self.runtime.loop, phase, state, sample,
                                  self.capture, self.padding_refusal is None,
                                  self.report_capture_failure)
            if workspace.reusable:
                self.workspaces[key] = workspace
        return workspace

    def finish(self, prepared: PreparedClient, score: bool = True) -> ClientResult:
        """Load a trained participant into the live module (its round resumed, so its
        Python state is its own), take its upload after the phase that asks for it, and end
        its round through the runtime (scored there where its task asks and ``score``)."""
        runtime = self.runtime
        started = prepared.started
        if not score:
            started = replace(started, task=replace(started.task, score=False))
        client = runtime.client
        client.pop_federated_logs()
        runtime.resume(started)
        uploaded = prepared.rows[runtime.upload_index(prepared.phases)]
        load_rows(client, uploaded)
        upload = client.upload()
        if uploaded is not prepared.rows[-1]:
            load_rows(client, prepared.rows[-1])
        return runtime.finish(started, upload, prepared.loss_sum, prepared.steps, {},
                              prepared.logs)


__all__ = ["BatchedEngine", "autotuned_convolutions", "steps_note"]
