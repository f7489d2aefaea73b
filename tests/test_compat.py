"""Every assumption of fedlight/compat/ about the installed lightning, jsonargparse, flwr and
torch.amp: a failure here names the upstream change that broke it (and the pins in
pyproject.toml)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Literal

import jsonargparse
import pytest
import torch
from lightning.pytorch.cli import LightningCLI

from fedlight.compat.grad_scaler import restart_growth
from fedlight.compat.jsonargparse_errors import read_parser_error
from fedlight.compat.jsonargparse_help import readable_type
from fedlight.compat.lightning_cli import DISABLED_CLI_STEPS, LightningCLISteps
from fedlight.parsing.messages import UsageError
from fedlight.parsing.parser import FedlightParser

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("step", DISABLED_CLI_STEPS)
def test_lightning_cli_still_calls_the_steps_fedlight_disables(step):
    calls = {node.func.attr for node in ast.walk(ast.parse(inspect.getsource(
        LightningCLI.__init__).strip().replace("\n    ", "\n"))) if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)}
    assert step in calls, (f"LightningCLI.__init__ no longer calls {step}: revisit "
                           "fedlight/compat/lightning_cli.py")
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


def test_jsonargparse_union_errors_of_choices_read_as_choices_and_the_given_value():
    class Loggers:
        def __init__(self, logger: Literal["csv", "wandb"] | list[Literal["csv", "wandb"]] | bool
                     = "csv") -> None:
            pass

    parser = FedlightParser(exit_on_error=False)
    parser.add_class_arguments(Loggers, "trainer")
    with pytest.raises(UsageError) as raised:
        parser.parse_args(["--trainer.logger", "mlflow"])
    error = read_parser_error(str(raised.value))
    assert (error.keys, error.choices, error.value) == (
        ["trainer.logger"], ["csv", "wandb"], "mlflow")


def test_jsonargparse_help_writes_types_and_known_subclasses_as_compat_reads_them(capsys):
    from fedlight.core.rules import ServerRule

    for method in ("_split_lines", "_get_help_string", "_get_type_str"):
        assert callable(getattr(jsonargparse.DefaultHelpFormatter, method, None)), method
    parser = jsonargparse.ArgumentParser(prog="plain")
    parser.add_class_arguments(Options, "model")
    parser.add_argument("--rule", type=ServerRule | None)
    parser.print_help()
    text = " ".join(capsys.readouterr().out.split())
    assert "(type: Literal['samples', 'uniform'], default: samples)" in text
    listed = re.search(r"known subclasses: ([^)]*)\)", text)
    assert listed is not None and "fedlight.server.FedAdam" in listed.group(1)
    assert readable_type("Union[Literal['a', 'b'], list[Literal['a', 'b']], bool]") == (
        "{a,b} | list[{a,b}] | bool")


def test_jsonargparse_missing_config_files_are_named(tmp_path):
    error = read_parser_error(parser_error("-c", str(tmp_path / "none.yaml")))
    assert error.missing_file is not None and "none.yaml" in error.missing_file


def test_jsonargparse_unknown_options_are_named():
    assert read_parser_error(parser_error("--model.lx", "1")).unknown_option == "model.lx"


def test_jsonargparse_class_path_and_yaml_errors_name_the_path_and_the_options_types(tmp_path):
    from fedlight.core.rules import ServerRule

    parser = FedlightParser(exit_on_error=False)
    parser.add_argument("-c", "--config", action=jsonargparse.ActionConfigFile)
    parser.add_argument("--rule", type=ServerRule | None)
    for given in ("fedlight.core.rules.Krumm", "Krumm"):
        with pytest.raises(UsageError) as raised:
            parser.parse_args(["--rule", given])
        error = read_parser_error(str(raised.value))
        assert (error.keys, error.unknown_class) == (["rule"], given), str(raised.value)
        assert error.subtypes == ["fedlight.core.rules.ServerRule"], str(raised.value)
    broken = tmp_path / "broken.yaml"
    broken.write_text("rule:\n  a: 1\n   b: 2\n")
    with pytest.raises(UsageError) as raised:
        parser.parse_args(["-c", str(broken)])
    assert read_parser_error(str(raised.value)).yaml_syntax, str(raised.value)


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
        if path.parent.name == "compat":
            continue
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


def test_a_gradscalers_state_dict_restarts_its_growth_counter():
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=3)
    assert "_growth_tracker" in scaler.state_dict()
    restart_growth(scaler, 1024.0)
    assert scaler.get_scale() == 1024.0
    assert scaler.state_dict()["_growth_tracker"] == 0


def test_flower_message_ids_runs_and_task_identity_are_where_compat_puts_them():
    pytest.importorskip("flwr")
    from flwr.app import Message, RecordDict

    from fedlight.compat.flower_internals import (
        empty_flower_run,
        set_task_identity,
        stamp_message_id,
    )

    set_task_identity(7, 1, 1)
    message = Message(RecordDict(), dst_node_id=1000, message_type="train")
    stamp_message_id(message, "abc")
    assert message.metadata.message_id == "abc"
    reply = Message(RecordDict(), reply_to=message)
    assert reply.metadata.reply_to_message_id == "abc"
    assert empty_flower_run(7).run_id == 7


def test_only_the_command_line_imports_the_command_line():
    """No import circle through fedlight.cli: the Flower apps and fedlight interpolate read
    configs with fedlight.config, never with the CLI class (console.py is the command's own
    entry point)."""
    package = ROOT / "fedlight"
    importers = []
    for path in package.rglob("*.py"):
        if package / "cli" in path.parents or path == package / "console.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if any(name == "fedlight.cli" or name.startswith("fedlight.cli.")
                   for name in names if name):
                importers.append(str(path.relative_to(package)))
    assert importers == []
