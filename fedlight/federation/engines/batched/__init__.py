"""Batched clients: several participants of a round trained as one vectorized computation.

The simulator trains a round's clients one after another on one live module. On a GPU a small
model's step for one client (a batch of 10 CIFAR images through a 4-layer CNN) leaves most of
the device idle and is bound by kernel launches, so ``trainer.batched_clients`` trains up to K
clients at once instead.

How a step is made: the clients' parameters and buffers are stacked, one tensor per name with
client k's values in row k, and the method's own ``training_step`` runs on them through
``torch.func.functional_call`` mapped over the rows with ``vmap`` (``stacked_step.py``), so a
method is never written twice. Per-client values the step reads (BatchNorm statistics,
frozen teachers, MAP's class scales, GPFL's conditional inputs, Ditto's received weights,
noise keys) are buffers, stacked like the weights. One backward and one optimizer over the
stacked tensors update every client: the optimizers fedlight builds (SGD with momentum and
weight decay, Adam, AdamW) update element by element with hyper-parameters shared by the
clients, exactly as each client's own optimizer would (``optimizer.py``). Random draws come
from each client's :class:`~fedlight.core.noise.NoiseSource` (keyed from
``(seed, round, client)`` in both engines), so a client draws the same noise batched as in
the loop, whoever shares its batch.

Each client keeps its own batches, drawn as the loop draws them (``planning.py``), and its
own number of steps. A group keeps one shape from its first step to its last
(``workspace.py``): a client's smaller last batch is padded with samples of weight 0 (its
method's losses and logged values are means over real samples, ``sample_weighted``), and a
client whose data is used up stays in the group with its step discarded (its parameters,
buffers and optimizer state put back). So every step of a group is the same static step,
captured once in a CUDA graph on a GPU and replayed (``graphs.py``; 32-true precision,
``trainer.cuda_graphs``); losses and logged values add up on the device and are read once
per group. Where a batch cannot be padded (BatchNorm sees the padding in its batch
statistics; a method whose loss does not weight samples: :func:`padding_refusal`), the steps
at which a client has a smaller batch run eagerly and ``BatchedEngine.steps_note`` says so.
The result equals the loop's to float tolerance (sums run in another order; float64 runs
agree to ~1e-15), not bit for bit, and does not depend on K.

Fail safe: a step that cannot be captured runs eagerly, with one line naming the cause;
running out of device memory (in a step or in its capture) halves the group.

What qualifies (:func:`batching_refusal`, ``eligibility.py``): a method whose step methods are
the base class's or declared ``batchable`` by the class that overrides them (FedAvg, FedPer,
LG-FedAvg, FedRep, FedBABU, Local, FedAWS, FedDF, SCARS, FedBN, GPFL, MAP / FedRS / FedPHP,
FedPick, Privatize, AutoSA / AutoCS / AutoHS, FedRoD, Ditto, FedProto), no Lightning loop
hook overridden, no ``torch.nn.Dropout`` (``fedlight.core.noise.Dropout`` instead), at 32-bit
or bf16 precision (16-mixed keeps one loss scaler per client), with fresh optimizers and no
gradient clipping. Clients whose phases (names, trainable parameters, learning-rate scale) or
``batch_key()`` differ train in separate groups. Anything else trains one client after
another, with a one-line note.

Scoring is batched the same way: every client to score (its download plus its private state,
or its state right after training for methods scored then, such as MAP) is loaded, its
context-derived buffers built (``refresh_buffers``), and up to K clients' states are stacked
and run through the method's own ``eval_outputs`` mapped over the rows
(``StackedOutputs``); each client's test split is cut into the loop's evaluation batches,
padded to the longest client's, and scored as the loop scores it
(``ClientRuntime.score_together``). Methods that fine-tune before scoring (FedBABU,
Per-FedAvg) or override ``eval_outputs`` without declaring it batchable are scored one
after another (:func:`scoring_refusal`); the run's header line says which.

Group size (``memory.py``): with ``group_size=None`` as many clients as half the device's
free memory holds, from an estimate per client.

Measured on a CPU it is slower (the 4-layer CNN on 3x32x32, batch 10, one thread: a round
takes 1.6x the loop's time with K = 4 and 3.2x with K = 20, since vmap turns the convolutions
into grouped ones, which oneDNN runs slower than K separate ones), so it is meant for GPUs;
``benchmarks/batched.py`` times it, and ``benchmarks/gpu.py`` runs that on a GPU.
"""

from fedlight.federation.engines.batched.eligibility import (
    batching_refusal,
    padding_refusal,
    scoring_refusal,
    undeclared_step,
)
from fedlight.federation.engines.batched.engine import (
    BatchedEngine,
    autotuned_convolutions,
    steps_note,
)
from fedlight.federation.engines.batched.memory import (
    activation_bytes,
    client_bytes,
    group_size_for,
)
from fedlight.federation.engines.batched.optimizer import stacked_optimizer
from fedlight.federation.engines.batched.planning import phase_batches, schedule_signature
from fedlight.federation.engines.batched.workspace import Workspace, step_capture

__all__ = ["BatchedEngine", "Workspace", "activation_bytes", "autotuned_convolutions",
           "batching_refusal", "client_bytes", "group_size_for", "padding_refusal",
           "phase_batches", "schedule_signature", "scoring_refusal", "stacked_optimizer",
           "step_capture", "steps_note", "undeclared_step"]
