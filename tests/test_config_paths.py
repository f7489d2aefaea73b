"""Paths in a config file resolve against the file's folder (a source's root, the FromFile
partition's path, any argument annotated ConfigPath, a class_path object's too); on the command
line against the working folder; ``~`` expanded, absolute paths kept; a missing folder's error
names the path as configured and as resolved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fedlight.cli import main
from fedlight.config import run_parser
from fedlight.core.paths import ConfigPath
from fedlight.parsing.parser import FedlightParser

REPO = Path(__file__).resolve().parents[1]


def write_config(folder: Path, root: str, partition_file: str | None = None) -> Path:
    """A config reading a PFLlib folder at ``root`` (and its split from ``partition_file``)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.yaml"
    data = {"source": {"class_path": "PFLlib", "init_args": {"root": root}}}
    if partition_file is not None:
        data["partition"] = {"class_path": "FromFile", "init_args": {"path": partition_file}}
    path.write_text(yaml.safe_dump({"model": {"class_path": "FedAvg"}, "data": data}))
    return path


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """The shell's folder: neither the repository nor the config's folder."""
    folder = tmp_path / "shell"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def test_a_config_files_paths_resolve_against_its_folder(tmp_path, elsewhere):
    config = write_config(tmp_path / "configs" / "mine", "../../data/set", "split.json")
    parsed = run_parser().parse_args(["-c", str(config)])
    assert parsed.data.source.init_args.root == str(tmp_path / "data" / "set")
    assert parsed.data.partition.init_args.path == str(
        tmp_path / "configs" / "mine" / "split.json")
    dumped = yaml.safe_load(run_parser().dump(parsed))  # what a run's config.yaml holds
    assert dumped["data"]["source"]["init_args"]["root"] == str(tmp_path / "data" / "set")


def test_command_line_paths_resolve_against_the_shells_folder_and_home_and_absolute_stay(
        tmp_path, elsewhere):
    config = write_config(tmp_path / "configs", "in_config")
    for given, expected in (("local", elsewhere / "local"), ("~/sets", Path.home() / "sets"),
                            (str(tmp_path / "abs"), tmp_path / "abs")):
        parsed = run_parser().parse_args(["-c", str(config), "--data.source.root", given])
        assert parsed.data.source.init_args.root == str(expected), given


class Source:
    """A data source of the later kind: a class given by class_path with a path argument."""

    def __init__(self, root: ConfigPath | None = None) -> None:
        self.root = root


def test_a_class_path_objects_path_arguments_resolve_against_the_file_too(tmp_path, elsewhere):
    parser = FedlightParser(exit_on_error=False)
    parser.add_argument("-c", "--config", action="config")
    parser.add_argument("--source", type=Source)
    config = tmp_path / "nested" / "c.yaml"
    config.parent.mkdir()
    config.write_text(f"source:\n  class_path: {__name__}.Source\n  init_args:\n"
                      "    root: files\n")
    parsed = parser.parse_args(["-c", str(config)])
    assert parsed.source.init_args.root == str(tmp_path / "nested" / "files")


def test_a_missing_folder_names_the_configured_and_the_resolved_path(tmp_path, elsewhere,
                                                                      capsys, monkeypatch):
    monkeypatch.delenv("FEDLIGHT_DEBUG", raising=False)
    config = write_config(tmp_path / "configs", "../nowhere")
    runs = tmp_path / "runs"
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", str(config), "--trainer.default_root_dir", str(runs)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert (f"'../nowhere' as configured, resolved against {tmp_path / 'configs'} to "
            f"{tmp_path / 'nowhere'}") in err
    assert not runs.exists()


def test_the_repositorys_configs_name_the_folders_they_named_from_the_repository_root(
        elsewhere):
    """Relative paths in configs/ were written against the repository root; they now
    resolve against each file's folder to the same folders."""
    cifar10 = run_parser().parse_args(["-c", str(REPO / "configs/fedavg/cifar10_dirichlet.yaml")])
    assert cifar10.data.source.init_args.root == str(REPO.parent / "shared" / "data" / "cifar10")
    paper = run_parser().parse_args(["-c", str(REPO / "configs/gpfl/paper/fmnist_dirichlet.yaml")])
    assert paper.data.source.init_args.root == str(REPO / "data")


def test_a_runs_config_yaml_reads_the_same_from_any_folder(tmp_path, elsewhere):
    config = write_config(tmp_path / "configs", "../data")
    dumped = run_parser().dump(run_parser().parse_args(["-c", str(config)]))
    saved = tmp_path / "run" / "config.yaml"
    saved.parent.mkdir()
    saved.write_text(dumped)
    again = run_parser().parse_args(["-c", str(saved)])
    assert again.data.source.init_args.root == str(tmp_path / "data")
    assert json.dumps(yaml.safe_load(dumped)["data"]) == json.dumps(
        yaml.safe_load(run_parser().dump(again))["data"])


def test_the_note_names_a_resolved_path_only_where_the_message_names_it(tmp_path,
                                                                         monkeypatch):
    from fedlight.core.paths import resolution_note

    monkeypatch.chdir(tmp_path)
    ConfigPath.resolve("sets/a")
    assert "'sets/a' as configured" in resolution_note(f"no {tmp_path}/sets/a/train folder")
    assert resolution_note(f"no {tmp_path}/sets/ab folder") == ""
