"""The ``search:`` section of a sweep file: what an Optuna study searches (config entries and
their distributions), the metric it reports round by round, its direction, trial count and
pruner; every bad entry is a one-line SweepError naming the value and what is valid."""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from fedlight.sweep.sweep_file_error import SweepError, mapping

SEARCH_KEYS = ("metric", "direction", "n_trials", "space", "pruner", "enqueue", "sampler_seed")
DIRECTIONS = ("maximize", "minimize")
#: The keys of a space entry, per type (each type also takes ``type``)
DISTRIBUTION_KEYS = {"float": ("low", "high", "log", "step"),
                     "int": ("low", "high", "log", "step"),
                     "categorical": ("choices",)}
#: Optuna's pruners a search may name (optuna.pruners.<name>, its arguments beside the name)
PRUNERS = ("MedianPruner", "PercentilePruner", "SuccessiveHalvingPruner", "HyperbandPruner",
           "ThresholdPruner", "NopPruner")
#: The scores metrics.csv has of each scored output (``<output>_<score>``, e.g.
#: personalized_accuracy, and ``val_<output>_<score>`` with data.val_fraction > 0), as the
#: evaluation names them; plus the round's training loss.
SCORES = ("accuracy", "accuracy_mean", "accuracy_std", "accuracy_cv", "accuracy_worst10", "loss",
          "macro_f1", "auc")
ROUND_COLUMNS = ("train_loss",)
#: Scores that are better lower: their default direction is minimize.
LOWER_IS_BETTER = ("loss", "accuracy_std", "accuracy_cv")


@dataclass(frozen=True)
class SearchSpec:
    """A ``search:`` section read and checked (``space``: config key -> Optuna distribution)."""

    metric: str
    direction: str
    n_trials: int
    space: dict[str, Any]
    pruner: str
    pruner_arguments: dict[str, Any]
    enqueue: tuple[dict[str, Any], ...] = ()
    sampler_seed: int | None = None

    def make_pruner(self) -> optuna.pruners.BasePruner:
        pruner: optuna.pruners.BasePruner = getattr(optuna.pruners, self.pruner)(
            **self.pruner_arguments)
        return pruner

    def first_point(self) -> tuple[tuple[str, Any], ...]:
        """Each searched key at its low end (or first choice): what a search resolves before
        it starts, so that a key ``fedlight fit`` does not know fails at once."""
        return tuple((key, d.choices[0] if isinstance(d, optuna.distributions
                                                       .CategoricalDistribution) else d.low)
                     for key, d in self.space.items())


def read_search(value: Any) -> SearchSpec:
    """The ``search:`` mapping as a SearchSpec; SweepError naming the first bad entry."""
    spec = mapping(value, "search")
    unknown = [k for k in spec if k not in SEARCH_KEYS]
    if unknown:
        raise SweepError(f"search: unknown key {unknown[0]!r}; valid: {', '.join(SEARCH_KEYS)}")
    metric = spec.get("metric")
    if not isinstance(metric, str):
        raise SweepError(f"search: metric must name a metrics.csv column (e.g. "
                         f"val_personalized_accuracy), got {metric!r}")
    check_metric(metric)
    default = "minimize" if metric.endswith(LOWER_IS_BETTER) else "maximize"
    direction = spec.get("direction", default)
    if direction not in DIRECTIONS:
        raise SweepError(f"search: direction: got {direction!r}; valid: {', '.join(DIRECTIONS)}")
    n_trials = spec.get("n_trials")
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise SweepError(f"search: n_trials must be a whole number of at least 1, got "
                         f"{n_trials!r}")
    space = mapping(spec.get("space"), "search: space")
    if not space:
        raise SweepError("search: space is empty: give at least one config key and its "
                         "distribution, e.g. model.init_args.lr: {type: float, low: 0.001, "
                         "high: 0.1, log: true}")
    distributions = {key: distribution(key, entry) for key, entry in space.items()}
    pruner, arguments = read_pruner(spec.get("pruner"))
    seed = spec.get("sampler_seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise SweepError(f"search: sampler_seed must be a whole number, got {seed!r}")
    enqueue = spec.get("enqueue") or []
    if not isinstance(enqueue, list):
        raise SweepError(f"search: enqueue must be a list of points (key: value mappings), got "
                         f"{enqueue!r}")
    points = tuple(check_point(mapping(point, "search: enqueue: a point"), distributions)
                   for point in enqueue)
    return SearchSpec(metric, direction, n_trials, distributions, pruner, arguments, points,
                      seed)


def check_metric(metric: str) -> None:
    """SweepError unless ``metric`` is a column metrics.csv can have (SCORES, ROUND_COLUMNS)."""
    name = metric.removeprefix("val_")
    if metric in ROUND_COLUMNS or any(
            name.endswith(f"_{score}") and len(name) > len(score) + 1 for score in SCORES):
        return
    raise SweepError(f"search: metric {metric!r} is not a column of metrics.csv; valid: "
                     f"<output>_<score> or val_<output>_<score> (output: personalized, global "
                     f"or the method's own; score: {', '.join(SCORES)}), e.g. "
                     f"val_personalized_accuracy, or {', '.join(ROUND_COLUMNS)}")


def _number(value: Any, what: str, whole: bool) -> float | int:
    """A number of a space entry (YAML reads 1e-4 as a string: a float string is taken)."""
    if isinstance(value, str) and not whole:
        try:
            value = float(value)
        except ValueError:
            pass
    valid = (int,) if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, valid) or (
            isinstance(value, float) and not math.isfinite(value)):
        raise SweepError(f"{what} must be {'a whole number' if whole else 'a number'}, got "
                         f"{value!r}")
    return value


def distribution(key: str, entry: Any) -> Any:
    """The Optuna distribution of one space entry: ``{type: float|int, low, high, log,
    step}``, ``{type: categorical, choices: [...]}`` or a list (its choices)."""
    what = f"search: space: {key}"
    if isinstance(entry, list):
        entry = {"type": "categorical", "choices": entry}
    entry = mapping(entry, what)
    kind = entry.get("type")
    if kind not in DISTRIBUTION_KEYS:
        raise SweepError(f"{what}: unknown type {kind!r}; valid: {', '.join(DISTRIBUTION_KEYS)}")
    unknown = [k for k in entry if k != "type" and k not in DISTRIBUTION_KEYS[kind]]
    if unknown:
        raise SweepError(f"{what}: unknown key {unknown[0]!r} for type {kind}; valid: "
                         f"{', '.join(DISTRIBUTION_KEYS[kind])}")
    if kind == "categorical":
        return _categorical(what, entry.get("choices"))
    missing = [k for k in ("low", "high") if k not in entry]
    if missing:
        raise SweepError(f"{what}: give low and high (missing {missing[0]})")
    whole = kind == "int"
    low, high = (_number(entry[k], f"{what}: {k}", whole) for k in ("low", "high"))
    if low > high:
        raise SweepError(f"{what}: low {low} is above high {high}")
    arguments: dict[str, Any] = {"low": low, "high": high, "log": bool(entry.get("log", False))}
    if entry.get("step") is not None:
        arguments["step"] = _number(entry["step"], f"{what}: step", whole)
    cls = optuna.distributions.IntDistribution if whole else (
        optuna.distributions.FloatDistribution)
    try:
        return cls(**arguments)
    except ValueError as error:  # Optuna's own checks (log needs low > 0, step with log)
        raise SweepError(f"{what}: {error}") from None


def _categorical(what: str, choices: Any) -> Any:
    if not isinstance(choices, list) or not choices:
        raise SweepError(f"{what}: choices must be a non-empty list, got {choices!r}")
    bad = [c for c in choices if c is not None and not isinstance(c, (bool, int, float, str))]
    if bad:
        raise SweepError(f"{what}: a choice must be a number, a string, a boolean or null (what "
                         f"Optuna stores), got {bad[0]!r}")
    return optuna.distributions.CategoricalDistribution(choices)


def read_pruner(value: Any) -> tuple[str, dict[str, Any]]:
    """``pruner: NAME`` or ``pruner: {name: NAME, <its arguments>}`` (default MedianPruner
    with Optuna's defaults), checked by building it."""
    if value is None:
        return "MedianPruner", {}
    arguments = {"name": value} if isinstance(value, str) else mapping(value, "search: pruner")
    name = arguments.pop("name", None)
    if name not in PRUNERS:
        raise SweepError(f"search: pruner: unknown pruner {name!r}; valid: {', '.join(PRUNERS)}")
    cls = getattr(optuna.pruners, name)
    try:
        inspect.signature(cls).bind(**arguments)
        cls(**arguments)
    except TypeError as error:
        valid = ", ".join(inspect.signature(cls).parameters) or "none"
        raise SweepError(f"search: pruner {name}: {error}; its arguments: {valid}") from None
    except ValueError as error:
        raise SweepError(f"search: pruner {name}: {error}") from None
    return name, arguments


def check_point(point: Mapping[str, Any], space: Mapping[str, Any]) -> dict[str, Any]:
    """An ``enqueue`` point: searched keys only, each value within its distribution."""
    for key, value in point.items():
        if key not in space:
            raise SweepError(f"search: enqueue: {key!r} is not a searched key; valid: "
                             f"{', '.join(space)}")
        given = space[key]
        if isinstance(given, optuna.distributions.CategoricalDistribution):
            inside = value in given.choices
        else:
            inside = (not isinstance(value, bool) and isinstance(value, (int, float))
                      and given.low <= value <= given.high)
        if not inside:
            raise SweepError(f"search: enqueue: {key}: {value!r} is outside its space "
                             f"({_describe(given)})")
    return dict(point)


def _describe(given: Any) -> str:
    if isinstance(given, optuna.distributions.CategoricalDistribution):
        return "choices: " + ", ".join(map(repr, given.choices))
    return f"{given.low} to {given.high}"
