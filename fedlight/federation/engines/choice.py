"""Which engine trains a run's clients, chosen on the user's device, and the first round made
safe.

``trainer.batched_clients: measure`` (and ``auto`` on a GPU) does not guess whether batched
clients beat the loop for this method, model, data and device: at the first round this process
trains, the first steps of that round's own participants are timed each way (:data:`LOOP`,
:data:`BATCHED` and, where CUDA graphs are allowed, :data:`GRAPHS`), and the fastest trains the
run. A way is timed on its second pass (the first builds its workspaces and captures its
graphs), up to :data:`PROBE_STEPS` local steps per client, with the device synchronised
before each reading of the clock; its figure is seconds per client step (the pass's wall time,
each client's start and finish included, over the steps its clients trained). The probe
changes nothing of the run: every client it trains is put back as it was (private state,
optimizer state, participation count), the global random generators are restored, the
module's logged values dropped, and the real round then trains from the same state; so a
measured run's metrics equal those of a run told the chosen way.

Whatever way was chosen (or asked for, as ``batched_clients: K``), an error of the batched
engine in the first round it trains, other than a fedlight user error (the message of a
:class:`~fedlight.core.errors.FedlightError` is for the user and stays), does not end the run:
the round is trained again with the loop from the same state, one line names the cause and the
loop trains the rest of the run.

The choice (way, the seconds of each way measured, the cause of a fallback) is written to the
run folder's :data:`CHOICE_FILE` and into every checkpoint, so that ``fit --ckpt_path last``
keeps it without measuring again.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from fedlight.core.errors import FedlightError
from fedlight.core.messages import (
    SIMULATOR,
    ClientEngine,
    ClientFailure,
    ClientResult,
    EngineHost,
    Score,
    State,
    TrainTask,
)
from fedlight.federation.engines.batched import BatchedEngine
from fedlight.federation.engines.sequential import SequentialEngine
from fedlight.federation.runtime import ClientRuntime

#: the ways a round's clients can train: one after another, batched, batched with its full
#: steps replayed from CUDA graphs
LOOP, BATCHED, GRAPHS = "loop", "batched", "batched + graphs"
WAYS = (LOOP, BATCHED, GRAPHS)
#: local steps per client of a timed pass (and of each round-trip through the probe)
PROBE_STEPS = 3
#: the run folder's record of the choice
CHOICE_FILE = "engine_choice.json"
Outcome = ClientResult | ClientFailure
#: the clock of the probe (tests replace it: no test depends on a measured time)
clock: Callable[[], float] = time.perf_counter


@dataclass
class EngineChoice:
    """The way a run's clients train, the seconds per client step measured of each way that
    was timed (empty when the way was asked for, not measured), the errors of the ways that
    failed while timed, and the cause of a fallback to the loop in the first round."""

    way: str
    seconds_per_step: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    fallback: str | None = None

    def record(self) -> dict[str, Any]:
        """The choice as the run folder and the checkpoints keep it."""
        return asdict(self)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> EngineChoice:
        return cls(str(record["way"]), dict(record.get("seconds_per_step", {})),
                   dict(record.get("failed", {})), record.get("fallback"))

    def line(self, steps: int, clients: int) -> str:
        """The one line saying what was measured and what was chosen."""
        timed = ", ".join(f"{way} {seconds:.3g}" for way, seconds in
                          self.seconds_per_step.items())
        failed = "".join(f"; {way} failed: {error}" for way, error in self.failed.items())
        return (f"fedlight: batched_clients measured seconds per client step over the first "
                f"{steps} steps of {clients} clients: {timed or 'none'}{failed}; the {self.way} "
                "trains the run")


def fastest(seconds: Mapping[str, float]) -> str:
    """The way of the fewest seconds (the earlier of :data:`WAYS` on a tie; the loop when
    nothing was timed)."""
    return min(seconds, key=lambda way: (seconds[way], WAYS.index(way)), default=LOOP)


def one_line(error: BaseException) -> str:
    """``Type: first line of the message``."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


class SavedClients:
    """What training ``client_ids`` through ``runtime`` may change, saved so it can be put
    back: each client's private state (copied: a disk store hands out views), optimizer state
    and participation count, and the global random generators of the CPU and the device."""

    def __init__(self, runtime: ClientRuntime, client_ids: Iterable[int]) -> None:
        self.runtime = runtime
        population = runtime.population
        self.snapshots = {client_id: copied(population.snapshot(client_id))
                          if client_id in population.states else None
                          for client_id in client_ids}
        device = runtime.fabric.device
        self.cpu_rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    def restore(self) -> None:
        """Put the clients and the generators back as they were saved, and drop what the
        module logged since."""
        for client_id, snapshot in self.snapshots.items():
            self.runtime.population.restore_client(client_id, copied(snapshot))
        torch.set_rng_state(self.cpu_rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state(self.cuda_rng, self.runtime.fabric.device)
        self.runtime.client.pop_federated_logs()


def copied(snapshot: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A client's snapshot with its private tensors copied."""
    if snapshot is None:
        return None
    return {**snapshot, "private": {k: v.clone() for k, v in snapshot["private"].items()}}


@contextlib.contextmanager
def step_cap(runtime: ClientRuntime, steps: int) -> Iterator[None]:
    """Clients of ``runtime`` train at most ``steps`` local steps (fewer where
    ``trainer.max_local_steps`` already says so) inside the block."""
    loop = runtime.loop
    cap = loop.max_local_steps
    loop.max_local_steps = steps if cap is None else min(cap, steps)
    try:
        yield
    finally:
        loop.max_local_steps = cap


def make_engine(way: str, runtime: ClientRuntime, group_size: int | None) -> ClientEngine:
    """The engine of ``way`` over ``runtime`` (batched: up to ``group_size`` clients at once,
    None: from the device's free memory)."""
    if way == LOOP:
        return SequentialEngine(runtime)
    return BatchedEngine(runtime, group_size, graphs=way == GRAPHS)


class ChosenEngine:
    """The simulator's engine when clients may train batched: the engine of the way chosen
    (module docstring), with the first round it trains guarded by the loop.

    Args:
        runtime: the client runtime of this process.
        ways: the ways to choose from; one way is used without measuring (a
            ``batched_clients: K`` run), several are timed at the first round.
        say: prints one line (the measurement).
        warn: prints one line (a fallback to the loop).
        make: the engine of a way.
        record: called with the choice's record whenever it is made or changed.
    """

    name = SIMULATOR
    holds_clients = True
    resume_hint: str | None = None

    def __init__(self, runtime: ClientRuntime, ways: Sequence[str],
                 say: Callable[[str], None], warn: Callable[[str], None],
                 make: Callable[[str], ClientEngine],
                 record: Callable[[dict[str, Any]], None] = lambda record: None) -> None:
        self.runtime, self.ways, self.make = runtime, tuple(ways), make
        self.say, self.warn, self.record = say, warn, record
        self.engines: dict[str, ClientEngine] = {}
        self.choice: EngineChoice | None = None
        self.guarded = False  # the first trained round is behind: no more fallback
        if len(self.ways) == 1:
            self.choice = EngineChoice(self.ways[0])

    @property
    def current(self) -> ClientEngine:
        """The engine that trains (the loop until a measured choice is made)."""
        return self.engine(self.choice.way if self.choice is not None else LOOP)

    def engine(self, way: str) -> ClientEngine:
        if way not in self.engines:
            self.engines[way] = self.make(way)
        return self.engines[way]

    def attach(self, host: EngineHost) -> None:
        """Every trainer option works in the simulator."""

    def keep(self, record: Mapping[str, Any]) -> None:
        """Train with the choice a checkpoint recorded (a resumed run): no measuring, no
        first-round fallback. A way the run does not offer (graphs where they are not
        allowed now) becomes plain batched."""
        choice = EngineChoice.from_record(record)
        if choice.way not in self.ways and choice.way != LOOP:
            choice.way = BATCHED
        self.choice, self.guarded = choice, True
        self.engines = {way: engine for way, engine in self.engines.items()
                        if way == choice.way}
        if choice.seconds_per_step or choice.fallback:  # chosen, not asked for
            self.say(f"fedlight: the {choice.way} trains the run, as its first round chose "
                     f"({CHOICE_FILE})")

    def train(self, tasks: Sequence[TrainTask]) -> Iterable[Outcome]:
        """Train the tasks with the chosen engine; at the first round with tasks, choose
        first (measuring) and guard the round (module docstring)."""
        if not tasks:
            return []
        if self.choice is None:
            self.measure(tasks)
        if self.guarded:
            return self.current.train(tasks)
        results = self.guard(tasks)
        self.guarded = True
        return results

    def evaluate(self, round_idx: int,
                 downloads: Mapping[int, State]) -> dict[int, dict[str, Score]]:
        return self.current.evaluate(round_idx, downloads)

    # ----------------------------------------------------------------- choosing
    def measure(self, tasks: Sequence[TrainTask]) -> None:
        """Time each way on ``tasks`` (without scoring) and keep the fastest."""
        probe = [replace(task, score=False) for task in tasks]
        seconds: dict[str, float] = {}
        failed: dict[str, str] = {}
        saved = SavedClients(self.runtime, [task.client_id for task in tasks])
        for way in self.ways:
            if way != LOOP:  # one batched engine's workspaces on the device at a time
                self.drop_batched()
            try:
                seconds[way] = self.time_way(way, probe, saved)
            except FedlightError:
                saved.restore()
                raise
            except Exception as error:  # a way that fails is not chosen; the line says why
                saved.restore()
                failed[way] = one_line(error)
                self.engines.pop(way, None)
        self.choice = EngineChoice(fastest(seconds), seconds, failed)
        if self.choice.way not in self.engines:
            self.drop_batched()
        self.engines = {self.choice.way: self.engine(self.choice.way)}
        self.say(self.choice.line(PROBE_STEPS, len(tasks)))
        self.record(self.choice.record())

    def drop_batched(self) -> None:
        """Let go of the batched engines made so far (their device memory with them)."""
        self.engines = {way: engine for way, engine in self.engines.items() if way == LOOP}
        if self.runtime.fabric.device.type == "cuda":
            torch.cuda.empty_cache()

    def time_way(self, way: str, tasks: Sequence[TrainTask], saved: SavedClients) -> float:
        """Seconds per client step of ``way`` on ``tasks``: a first pass of one step each
        (workspaces built, graphs captured), then the timed pass; the clients are put back
        after each."""
        engine = self.engine(way)
        with step_cap(self.runtime, 1):
            list(engine.train(tasks))
        saved.restore()
        device = self.runtime.fabric.device
        with step_cap(self.runtime, PROBE_STEPS):
            synchronize(device)
            started = clock()
            steps = sum(result.steps for result in engine.train(tasks)
                        if isinstance(result, ClientResult))
            synchronize(device)
            elapsed = clock() - started
        saved.restore()
        return elapsed / max(steps, 1)

    # ----------------------------------------------------------------- the first round
    def guard(self, tasks: Sequence[TrainTask]) -> list[Outcome]:
        """Train the first round; where a batched engine fails, put the clients back, say
        why and train the round (and the run) with the loop."""
        assert self.choice is not None
        if self.choice.way == LOOP:
            return list(self.current.train(tasks))
        saved = SavedClients(self.runtime, [task.client_id for task in tasks])
        try:
            return list(self.current.train(tasks))
        except FedlightError:
            raise
        except Exception as error:  # any fault of the batched engine: the loop takes over
            saved.restore()
            cause = one_line(error)
            way = self.choice.way
            self.choice = replace(self.choice, way=LOOP, fallback=f"{way}: {cause}")
            self.drop_batched()
            self.warn(f"fedlight: batched clients failed in round {tasks[0].round_idx + 1} "
                      f"({cause}); the round is trained again one client after another, "
                      "as is the rest of the run")
            self.record(self.choice.record())
            return list(self.current.train(tasks))


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (timings on a GPU read the clock after it)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


__all__ = ["BATCHED", "CHOICE_FILE", "GRAPHS", "LOOP", "PROBE_STEPS", "WAYS", "ChosenEngine",
           "EngineChoice", "SavedClients", "fastest", "make_engine", "one_line", "step_cap"]
