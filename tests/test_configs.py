"""Every YAML under configs/ runs as it is (one round, on the embedded data).

Paper-scale configs under ``configs/**/paper/`` need datasets the user downloads; they are
parsed and their names checked, and those reading a folder source run one round on tiny files
written in that dataset's own format (``dataset_files``).
"""

import inspect
import json
import re
from importlib import import_module
from pathlib import Path

import dataset_files
import pytest
import yaml

from fedlight.cli import FedlightCLI, main
from fedlight.clients import CLIENTS
from fedlight.data.sources import SOURCES, Source

ROOT = Path(__file__).resolve().parents[1] / "configs"
ALL = sorted(ROOT.rglob("*.yaml"))
# configs/server/ holds fragments (a top-level server: section) added after a method's config
SERVER = [p for p in ALL if p.parent.name == "server"]
PAPER = [p for p in ALL if "paper" in p.relative_to(ROOT).parts]
# configs reading a dataset's files run on small files written in its format (a paper config,
# or one reading real data from ../shared, which a test must not decode whole)


def data_section(path: Path) -> dict:
    return yaml.safe_load(path.read_text())["data"]


def source_name(path: Path) -> str:
    """The name (``cifar10``) of the source a config's ``data.source: {class_path: ...}``
    names by its class."""
    names = {cls.__name__: name for name, cls in SOURCES.items()}
    return names[data_section(path)["source"]["class_path"]]


ON_FILES = [p for p in ALL if p not in SERVER and source_name(p) in dataset_files.WRITERS]
RUNNABLE = [p for p in ALL if "paper" not in p.relative_to(ROOT).parts and p not in SERVER
            and p not in ON_FILES]


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


# One round of one local epoch at batch 50 (configs train 1-6 epochs at batch 10-64): every
# line of a config is parsed and run at a fraction of its steps, so the ~100 configs stay
# within the suite's time budget.
TINY = ["--trainer.rounds", "1", "--trainer.local_epochs", "1", "--trainer.batch_size", "50",
        "--trainer.progress_bar", "false", "--trainer.logger", "csv"]


#: backbones too heavy for a full round on CPU in the suite: their configs also run on at most
#: 100 samples per client (data.caps.client_samples)
HEAVY_BACKBONES = {"digit_cnn"}


def tiny_args(config: Path) -> list[str]:
    model = yaml.safe_load(config.read_text()).get("model", {})
    heavy = model.get("init_args", {}).get("backbone") in HEAVY_BACKBONES
    return TINY + (["--data.caps.client_samples", "100"] if heavy else [])


@pytest.fixture
def no_figures(monkeypatch):
    """The two figures of a run (tested in test_report) cost ~2 s of each config's run."""
    monkeypatch.setattr("fedlight.federation.outputs.writer.plot_curves", lambda *args: None)
    monkeypatch.setattr("fedlight.data.datamodule.save_heatmap", lambda *args: None)


@pytest.mark.parametrize("config", RUNNABLE, ids=_id)
def test_config_runs_one_round(config, tmp_path, no_figures):
    main(["fit", "-c", str(config), *tiny_args(config), "--trainer.default_root_dir",
          str(tmp_path)])
    summaries = list(tmp_path.glob("*/summary.json"))
    assert len(summaries) == 1
    summary = json.loads(summaries[0].read_text())
    assert summary["rounds"] == 1
    assert 0.0 <= summary["last_personalized_accuracy"] <= 1.0


@pytest.mark.parametrize("config", SERVER, ids=_id)
def test_server_fragment_runs_after_a_method_config(config, tmp_path, no_figures):
    main(["fit", "-c", str(ROOT / "fedavg/mnist5k_dirichlet.yaml"), "-c", str(config), *TINY,
          "--data.num_clients", "8", "--trainer.default_root_dir", str(tmp_path)])
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    expected = yaml.safe_load(config.read_text())["server"]["class_path"]
    assert summary["server"] == expected and summary["rounds"] == 1


class _ParseOnly(FedlightCLI):
    def instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        class_name = config.model.class_path.rsplit(".", 1)[-1]
        assert class_name in CLIENTS, class_name
        source = import_module(config.data.source.class_path.rsplit(".", 1)[0])
        assert issubclass(getattr(source, config.data.source.class_path.rsplit(".", 1)[1]),
                          Source), config.data.source

    def _run_subcommand(self, subcommand: str) -> None:
        pass


@pytest.mark.parametrize("config", PAPER, ids=_id)
def test_paper_config_parses(config):
    _ParseOnly(args=["fit", "-c", str(config)])


#: What shrinks a paper config to the tiny files: clients that fit a few images per class,
#: small images (FedPick's mask network grows with the square of the feature size) and FC
#: layers for AlexNet (its FC stack is 38M parameters at 4096).
FIXTURE_ARGS = {
    "tinyimagenet": ["--data.num_clients", "2"],
    "cinic10": ["--data.num_clients", "3"],
    "femnist": ["--data.num_clients", "4"],
    "office_caltech10": ["--data.source.image_size", "64", "--model.init_args.backbone_kwargs",
                         '{"fc_dims": [64, 64]}', "--data.caps.train_samples", "20"],
    "domainnet10": ["--data.source.image_size", "64", "--model.init_args.backbone_kwargs",
                    '{"fc_dims": [64, 64]}'],
    "digits5_real": ["--data.source.image_size", "16"],  # digit_cnn: 2048 features, not 8192
    "agnews": ["--data.num_clients", "3"],
    "shakespeare": ["--data.num_clients", "4", "--trainer.join_ratio", "1.0"],
    "har": ["--data.num_clients", "5"],
    "amazon_review": [],
    "imagefolder": ["--data.source.image_size", "16"],  # as digits5_real (digit_cnn)
}


#: What shrinks a non-paper config on the tiny files: its split's client count
CONFIG_FIXTURE_ARGS = {
    "fedavg/cifar10_dirichlet.yaml": ["--data.num_clients", "2"],
}

#: ... and each partition's size for a few images per class
PARTITION_FIXTURE_ARGS = {
    "Dirichlet": ["--data.partition.min_client_size", "2"],
    "Incomplete": ["--data.partition.min_client_size", "2"],
    "Pathological": ["--data.partition.classes_per_client", "2"],
}


@pytest.mark.parametrize("config", ON_FILES, ids=_id)
def test_config_runs_one_round_on_files_in_the_real_format(
    config, tmp_path, no_figures, monkeypatch
):
    monkeypatch.setenv("FEDLIGHT_CACHE", str(tmp_path / "cache"))
    source = source_name(config)
    root = dataset_files.WRITERS[source](tmp_path / "data")
    takes_download = "download" in inspect.signature(SOURCES[source]).parameters
    partition = (data_section(config).get("partition") or {}).get("class_path")
    main(["fit", "-c", str(config), *TINY, "--data.source.root", str(root),
          *(["--data.source.download", "false"] if takes_download else []),
          *PARTITION_FIXTURE_ARGS.get(partition, []),
          *FIXTURE_ARGS[source], *CONFIG_FIXTURE_ARGS.get(_id(config), []),
          "--trainer.accelerator", "cpu",
          "--trainer.default_root_dir", str(tmp_path / "runs")])
    summary = json.loads(next((tmp_path / "runs").glob("*/summary.json")).read_text())
    assert summary["rounds"] == 1
    assert 0.0 <= summary["last_personalized_accuracy"] <= 1.0


def test_readme_paper_table_names_existing_configs_and_every_folder_source_config():
    readme = (ROOT.parent / "README.md").read_text()
    table = readme[readme.index("### Paper setting -> config"):]
    table = table[:table.index("\n\n", table.index("| --- |"))]
    named = set(re.findall(r"`configs/([\w/.-]+\.yaml)`", table))
    assert named and all((ROOT / name).is_file() for name in named), named
    assert {_id(p) for p in ON_FILES if p in PAPER} <= named


def test_configs_exist_for_the_core_methods():
    names = {_id(p) for p in RUNNABLE}
    for required in ("fedavg/mnist5k_dirichlet.yaml", "fedavg/mnist5k_pathological.yaml",
                     "local/mnist5k_dirichlet.yaml", "local/mnist5k_pathological.yaml"):
        assert required in names


def test_print_config_works(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", str(ROOT / "fedavg/mnist5k_dirichlet.yaml"), "--print_config"])
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    # the shortest public path of the class (fedlight exports every method)
    assert "class_path: fedlight.FedAvg" in printed and "rounds: 30" in printed


def test_unknown_model_name_is_a_clear_error(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "-c", str(ROOT / "fedavg/mnist5k_dirichlet.yaml"), "--model", "FedAvgg"])
    assert "FedAvgg" in capsys.readouterr().err


def test_unknown_source_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", str(ROOT / "fedavg/mnist5k_dirichlet.yaml"), "--data.source", "MNST",
              "--trainer.default_root_dir", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "error: data.source: unknown class 'MNST'; valid: AGNews" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_impossible_partition_is_a_clear_error_and_writes_nothing(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", str(ROOT / "fedavg/mnist5k_pathological.yaml"),
              "--data.partition.classes_per_client", "11", "--trainer.default_root_dir",
              str(tmp_path)])
    assert exit_info.value.code == 2
    assert "classes_per_client=11" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_validate_and_test_evaluate_the_last_run(tmp_path, capsys):
    config = str(ROOT / "fedavg/mnist5k_dirichlet.yaml")
    common = ["--trainer.default_root_dir", str(tmp_path), "--trainer.progress_bar", "false",
              "--data.num_clients", "4", "--data.partition.beta", "1.0"]
    main(["fit", "-c", config, "--trainer.rounds", "1", *common])
    main(["test", "-c", config, *common])
    metrics = json.loads(next(tmp_path.glob("*/test_metrics.json")).read_text())
    assert 0 <= metrics["personalized_accuracy"] <= 1
    main(["validate", "-c", config, *common])
    assert "validate_personalized_accuracy" in capsys.readouterr().out
