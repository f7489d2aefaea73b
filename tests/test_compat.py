"""Every assumption of fedlight/compat.py about the installed lightning and jsonargparse: a
failure here names the upstream change that broke it (and the pins in pyproject.toml)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Literal

import jsonargparse
import pytest
from lightning.pytorch.cli import LightningCLI

from fedlight.compat import DISABLED_CLI_STEPS, LightningCLISteps, read_parser_error
from fedlight.errors import FedlightParser, UsageError

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("step", DISABLED_CLI_STEPS)
def test_lightning_cli_still_calls_the_steps_fedlight_disables(step):
    calls = {node.func.attr for node in ast.walk(ast.parse(inspect.getsource(
        LightningCLI.__init__).strip().replace("\n    ", "\n"))) if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)}
    assert step in calls, f"LightningCLI.__init__ no longer calls {step}: revisit compat.py"
    assert getattr(LightningCLISteps, step) is not getattr(LightningCLI, step)


class Options:
    def __init__(self, lr: float = 0.1, weighting: Literal["samples", "uniform"] = "samples",
                 name: str | None = None) -> None:
        pass


def parser_error(*args: str) -> str:
    parser = FedlightParser(exit_on_error=False)
    parser.add_argument("-c", "--config", action=jsonargparse.ActionConfigFile)
    parser.add_class_arguments(Options, "model")
    with pytest.raises(UsageError) as error:
        parser.parse_args(list(args))
    return str(error.value)


def test_jsonargparse_type_errors_read_as_key_expected_and_value():
    error = read_parser_error(parser_error("--model.lr", "abc"))
    assert (error.keys, error.expected, error.value) == (["model.lr"], "float", "abc")


def test_jsonargparse_literal_errors_read_as_choices():
    error = read_parser_error(parser_error("--model.weighting", "sample"))
    assert (error.choices, error.value) == (["samples", "uniform"], "sample")


def test_jsonargparse_missing_config_files_are_named(tmp_path):
    error = read_parser_error(parser_error("-c", str(tmp_path / "none.yaml")))
    assert error.missing_file is not None and "none.yaml" in error.missing_file


def test_jsonargparse_unknown_options_are_named():
    assert read_parser_error(parser_error("--model.lx", "1")).unknown_option == "model.lx"


def test_nested_union_errors_read_down_to_the_innermost_reason():
    from fedlight.cli import FedlightCLI

    for args, keys, check in (
            (["--model", "FedAvg", "--model.init_args.lr", "abc"], ["model", "lr"],
             lambda e: (e.expected, e.value) == ("float", "abc")),
            (["--model", "GPLF"], ["model"], lambda e: e.unknown_class == "GPLF")):
        with pytest.raises(UsageError) as raised:
            FedlightCLI(args=["fit", *args])
        error = read_parser_error(str(raised.value))
        assert error.keys == keys and check(error), str(raised.value)


def test_no_underscore_name_of_these_packages_is_used_outside_compat():
    packages = ("lightning", "jsonargparse", "flwr", "wandb")
    offenders = []
    for path in (ROOT / "fedlight").rglob("*.py"):
        if path.name == "compat.py" or "flower" in path.parts:
            continue  # fedlight/flower/* is checked where its Flower entries live
        tree = ast.parse(path.read_text())
        imported = {alias.asname or alias.name.split(".")[0]:
                    getattr(node, "module", None) or alias.name
                    for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)
                    for alias in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in packages:
                offenders += [f"{path.name}: {a.name}" for a in node.names
                              if a.name.startswith("_")]
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not (
                    node.attr.startswith("__")) and isinstance(node.value, ast.Name) and (
                    imported.get(node.value.id, "").split(".")[0] in packages):
                offenders.append(f"{path.name}: {node.value.id}.{node.attr}")
        text = path.read_text()
        offenders += [f"{path.name}: {name}" for name in (
            "._parse_ckpt_path", "._set_seed", "self._get(", "self._parser(", "._experiment",
            "jsonargparse._") if name in text]
    assert not offenders
