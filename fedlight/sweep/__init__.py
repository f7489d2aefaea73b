"""``fedlight sweep SWEEP.yaml``: a grid of ``fedlight fit`` runs, cached, resumable, tabulated;
or, with a ``search:`` section, an Optuna search whose bad trials stop early.

A sweep file (YAML; paths in it are relative to the file)::

    name: gpfl_table1                # results go to sweeps/<name>/ unless --out
    base: ../../configs/gpfl/mnist5k_pathological.yaml   # the fit config every run starts from
    overrides: {trainer.rounds: 40}  # config entries (dotted or nested) for every run
    methods:                         # label: class name, or class_path / init_args / config /
      FedAvg: FedAvg                 #   overrides (extra config files and entries of that row)
      GPFL: {class_path: GPFL, init_args: {lamda: 0.01, mu: 0.1}}
    settings:                        # label: config entries (data / partition variants)
      pathological: {data.partition: pathological, data.classes_per_client: 2}
      dirichlet: {data.partition: dirichlet, data.beta: 0.1}
    seeds: 3                         # 0, 1, 2 (or a list); each sets every key of seed_keys
    seed_keys: [trainer.seed]        # e.g. [trainer.seed, data.seed]: a partition per seed
    grid: {model.init_args.lr: [0.005, 0.01]}   # every combination of these values
    select: validation               # optional: per method and setting, the grid point with
                                     #   the best validation accuracy (data.val_fraction > 0)
    columns: [hpm_accuracy_mean]     # optional: more metrics.csv columns (last value) to tabulate

Every run is a method x setting x grid point x seed. Its configuration is resolved by the
``fit`` parser (a method keeps the base's model arguments its class accepts, as
``--model NAME`` does) and keyed by a hash of the result: ``<out>/runs/<cell>-<key>/`` is its
run folder and ``<out>/runs/<cell>-<key>.json`` its record (wall and CPU seconds, or the
error). A cell with a record is never run again, so a sweep stopped or killed part-way resumes
where it stopped (a run with a checkpoint resumes from it); changing anything that changes the
result (the rounds too) makes a new cell. Written to ``<out>``: ``report.md`` (``fedlight
report``'s table of the runs, with wall and CPU seconds per run, and its plots), ``results.csv``
(the same groups: mean, sample standard deviation over seeds and count per column),
``runs.csv`` (one row per run), and with ``select``, ``selection.md``. Runs of different
lengths are never pooled. Each run is a W&B run grouped under the sweep's name when
``trainer.logger`` includes wandb.

A search (a ``search:`` section in place of grid and select; one seed)::

    search:
      metric: val_personalized_accuracy  # a metrics.csv column, read every evaluated round
      direction: maximize                # default: minimize for *_loss, *_std, *_cv
      n_trials: 30                       # trials per method and setting (--trials N)
      space:                             # config entries and their Optuna distributions
        model.init_args.lr: {type: float, low: 1.0e-4, high: 0.1, log: true}
        trainer.local_epochs: {type: int, low: 1, high: 5}
        model.init_args.mu: [0.0, 0.01, 0.1]     # a list: categorical
      pruner: {name: MedianPruner, n_startup_trials: 5, n_warmup_steps: 2}
      enqueue: [{model.init_args.lr: 0.01}]      # optional: points tried first
      sampler_seed: 0                    # optional: seeds Optuna's TPE sampler

Each method and setting is one Optuna study; each trial is one cell (its point drawn by the
study) run in a process of its own. The metric of every evaluated round is read from the
run's ``metrics.csv`` as it is written and reported to the trial; a trial the pruner stops
(MedianPruner, PercentilePruner, SuccessiveHalvingPruner, HyperbandPruner, ThresholdPruner or
NopPruner, with their Optuna arguments beside ``name``) ends after its round in progress, its
run folder marked by ``pruned.json``. A trial's value is its best round's metric. The studies
are stored in ``<out>/optuna.db`` (SQLite): a search stopped or killed resumes where it
stopped (a trial cut off mid-run is tried again, its run resuming from its checkpoint; a
finished trial never runs again). Written to ``<out>``: ``trials.csv`` (one row per trial:
state, value, parameters, run folder), and ``report.md`` (with each study's best trial),
``results.csv`` and ``runs.csv`` of the complete trials.
"""

from fedlight.sweep.command import main
from fedlight.sweep.plan import cache_key, plan_sweep
from fedlight.sweep.runner import cpu_seconds, resolve_arguments
from fedlight.sweep.spec import load_sweep, read_sweep
from fedlight.sweep.sweep_file_error import SweepError

__all__ = ["SweepError", "cache_key", "cpu_seconds", "load_sweep", "main", "plan_sweep",
           "read_sweep", "resolve_arguments"]
