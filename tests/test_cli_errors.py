"""Every user error of the command line fits one screen: ``error: ...``, exit code 2, no
traceback, a "did you mean" where a close name exists, and no run folder left behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch.nn.functional as F

import fedlight
from fedlight.cli import TOOLS, FedlightCLI, main
from fedlight.config import read_config

ROOT = Path(__file__).resolve().parents[1] / "configs"
DIRICHLET = str(ROOT / "fedavg/mnist5k_dirichlet.yaml")
PATHOLOGICAL = str(ROOT / "fedavg/mnist5k_pathological.yaml")

CASES = {
    "typo in model": (["--model", "GPLF"], "unknown model 'GPLF'; valid: ", "did you mean 'GPFL'?"),
    "typo in YAML key": (["-c", "{typo}"], "'data.sed'", "did you mean 'data.seed'?"),
    "typo in option": (["--trainer.roundz", "3"], "--trainer.roundz",
                       "did you mean 'trainer.rounds'?"),
    "typo in source": (["--data.source", "MNIST5kk"], "data.source: unknown class 'MNIST5kk'",
                       "did you mean 'MNIST5k'?"),
    "negative beta": (["--data.partition.beta", "-1"], "beta=-1.0 is invalid", "use beta > 0"),
    "classes per client": (["-c", PATHOLOGICAL, "--data.partition.classes_per_client", "11"],
                           "classes_per_client=11", "use 1..10"),
    "missing data folder": (["--data.source", "PFLlib", "--data.source.root", "{tmp}/nowhere"],
                            "nowhere", "config.json"),
    "flat partition key in a YAML": (["-c", "{flat}"], "error: data.beta moved: use "
                                     "data.partition: {class_path: Dirichlet, init_args: "
                                     "{beta: 0.3}}"),
    "source name in a YAML": (["-c", "{named}"], "error: data.source: cifar10 moved: use "
                              "data.source: {class_path: CIFAR10} (valid: AGNews, "),
    "flat cap on the command line": (["--data.max_train_samples", "5"], "error: "
                                     "data.max_train_samples moved: use data.caps: "
                                     "{train_samples: ...}"),
    "flat source key on the command line": (["--data.root", "x"], "error: data.root moved: "
                                            "use data.source: {class_path: <Source>, "
                                            "init_args: {root: ...}}"),
    "partition name on the command line": (["--data.partition", "shards"], "error: "
                                           "data.partition: shards moved: use data.partition: "
                                           "{class_path: Shards}"),
    "zero rounds": (["--trainer.rounds", "0"], "rounds must be at least 1, got 0", ""),
    "join ratio": (["--trainer.join_ratio", "1.5"], "join_ratio must be in (0, 1], got 1.5", ""),
    "no clients": (["--data.num_clients", "0"], "num_clients must be at least 1, got 0", ""),
    "too many clients": (["--data.num_clients", "100000"], "num_clients=100000",
                         "use at most 500 clients"),
    "negative lr": (["--model.lr", "-1"], "lr must be positive, got -1.0", ""),
    "missing config": (["-c", "{tmp}/none.yaml"], "config file", "none.yaml' does not exist"),
    "no run to resume": (["--ckpt_path", "last"], "ckpt_path='last'", "no run named"),
    "double precision": (["--trainer.precision", "64-true"], "precision '64-true' is not "
                         "supported; valid: 32-true, 16-mixed, bf16-mixed", ""),
    "transformer engine": (["--trainer.precision", "transformer-engine"],
                           "precision 'transformer-engine' is not supported", ""),
    "half weights": (["--trainer.precision", "bf16-true"], "'bf16-true' is not supported", ""),
    "not a number": (["--model.init_args.lr", "abc"], "model.lr: expected a float, got 'abc'",
                     ""),
    "not a choice": (["--trainer.weighting", "sample"], "trainer.weighting: got 'sample'; "
                     "valid: samples, uniform", "did you mean 'samples'?"),
    "unknown logger": (["--trainer.logger", "wandbb"], "trainer.logger: got 'wandbb'; valid: "
                       "csv, tensorboard, wandb", "did you mean 'wandb'?"),
    "YAML syntax": (["-c", "{broken}"], "broken.yaml, line 3, column 15: not valid YAML: "
                    "mapping values are not allowed here", "expected the key indented as the "
                    "keys beside it", "the line reads '   num_clients: 4'"),
    "typo in a class path": (["--model", "fedlight.clients.GPFLL"],
                             "unknown model 'fedlight.clients.GPFLL'; valid: ",
                             "did you mean 'fedlight.clients.GPFL'?"),
    "typo in a server rule": (["--server", "TrimedMean"], "server: unknown class 'TrimedMean'; "
                              "valid: ", "did you mean 'TrimmedMean'?"),
    "typo in a server class path": (["--server", "fedlight.server.TrimedMean"],
                                    "server: unknown class", "did you mean "
                                    "'fedlight.server.TrimmedMean'?"),
    "abbreviated option": (["--trainer.round", "2"], "--trainer.round 2; options are never "
                           "abbreviated; did you mean 'trainer.rounds'?"),
}


@pytest.mark.parametrize("case", CASES)
def test_user_error_is_one_screen_with_exit_code_2(case, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FEDLIGHT_DEBUG", raising=False)
    typo = tmp_path / "typo.yaml"
    typo.write_text("data:\n  sed: 1\n")
    flat, named = tmp_path / "flat.yaml", tmp_path / "named.yaml"
    flat.write_text("data:\n  beta: 0.3\n")
    named.write_text("data:\n  source: cifar10\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("data:\n  source: digits\n   num_clients: 4\n")
    options, *expected = CASES[case]
    options = [o.format(tmp=tmp_path, typo=typo, broken=broken, flat=flat, named=named)
               for o in options]
    runs = tmp_path / "runs"
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", DIRICHLET, *options, "--trainer.default_root_dir", str(runs)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1  # one line, as the README says
    for fragment in expected:
        assert fragment in err
    assert not runs.exists() or not any(runs.iterdir())


def test_a_yaml_syntax_error_of_export_partition_names_the_file_and_line(tmp_path, capsys,
                                                                        monkeypatch):
    monkeypatch.delenv("FEDLIGHT_DEBUG", raising=False)
    broken = tmp_path / "broken.yaml"
    broken.write_text("data:\n  source: [digits\nmodel: FedAvg\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["export-partition", str(broken), str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {broken}, line 3, column 6: not valid YAML: expected ',' or "
                          "']', but got ':' (while parsing a flow sequence from line 2)")
    assert len(err.splitlines()) == 1 and not (tmp_path / "out").exists()


def test_an_unknown_figure_format_is_refused_before_anything_runs(tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.delenv("FEDLIGHT_DEBUG", raising=False)
    monkeypatch.setenv("FEDLIGHT_FIGURE_FORMATS", "png,svgz")
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", DIRICHLET, "--trainer.default_root_dir", str(tmp_path / "runs")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "error: FEDLIGHT_FIGURE_FORMATS: figure format 'svgz' is not known; valid: png, pdf")
    assert not (tmp_path / "runs").exists()


def test_help_of_an_unknown_model_lists_the_models(capsys, monkeypatch):
    monkeypatch.delenv("FEDLIGHT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--model", "GPLF", "--help"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown model 'GPLF'; valid: APFL, ")
    assert err.strip().endswith("did you mean 'GPFL'?")


def test_the_debug_switch_shows_the_exception(monkeypatch):
    monkeypatch.setenv("FEDLIGHT_DEBUG", "1")
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        main(["fit", "-c", DIRICHLET, "--trainer.rounds", "0"])


def test_top_level_help_lists_every_subcommand(capsys):
    main(["--help"])
    out = capsys.readouterr().out
    assert out.startswith("fedlight")
    for command in [*FedlightCLI.subcommands(), *TOOLS]:
        assert f"\n  {command} " in out


@pytest.mark.parametrize("form", [["--model", "GPFL", "--help"], ["--model=GPFL", "-h"],
                                  ["--model.help", "GPFL"]])
def test_fit_model_help_prints_the_methods_options(form, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *form])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--model.lamda" in out and "--model.use_cov" in out  # GPFL's own switches
    assert "--trainer.rounds" not in out


def test_a_bad_choice_names_the_option_and_the_valid_values(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "-c", DIRICHLET, "--trainer.weighting", "uniformm"])
    assert capsys.readouterr().err.startswith(
        "error: trainer.weighting: got 'uniformm'; valid: samples, uniform; "
        "did you mean 'uniform'?")


def test_fit_help_describes_trainer_options_and_ckpt_path(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--trainer.rounds ROUNDS communication rounds." in out
    assert "--trainer.weighting {samples,uniform}" in out
    assert "--ckpt_path CKPT_PATH resume a run" in out
    assert "pfllib" in out and "digits5" in out and "``" not in out.split("--data.source")[1][:600]


def test_help_lists_the_backbones_and_tools_name_their_command(capsys):
    from fedlight.models import BACKBONES

    with pytest.raises(SystemExit):
        main(["fit", "--model", "GPFL", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "one of: " + ", ".join(sorted(BACKBONES)) in text
    with pytest.raises(SystemExit):
        main(["interpolate", "--help"])
    assert capsys.readouterr().out.startswith("usage: fedlight interpolate ")


def test_a_cli_run_shows_no_other_librarys_notes_and_config_yaml_has_fedlights_header(
        tmp_path, capsys, monkeypatch, recwarn):
    # every jsonargparse deprecation note shown (not only the first of the process)
    monkeypatch.setenv("JSONARGPARSE_DEPRECATION_WARNINGS", "all")
    monkeypatch.setattr("sys.argv", ["fedlight", "fit", "--trainer.rounds", "1"])
    main(["fit", "--model", "FedAvg", "--model.init_args.backbone", "mlp",
          "--data.source", "Synthetic", "--data.num_clients", "2", "--data.source.samples",
          "60", "--data.source.shape", "[1,4,4]", "--trainer.rounds", "1",
          "--trainer.verbose", "false", "--trainer.progress_bar", "false",
          "--trainer.default_root_dir", str(tmp_path), "--trainer.run_name", "quiet"])
    notes = [str(w.message) for w in recwarn
             if "jsonargparse" in w.filename or "lightning/pytorch/cli" in w.filename]
    assert notes == []
    assert "Deprecat" not in capsys.readouterr().err
    assert (tmp_path / "quiet" / "config.yaml").read_text().startswith(
        f"# fedlight=={fedlight.__version__}\ntrainer:\n")


@pytest.mark.parametrize("command", ["fit", "validate"])
def test_help_starts_with_a_one_line_usage_of_the_command(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert capsys.readouterr().out.startswith(
        f"usage: fedlight {command} [-h] [-c CONFIG] [--print_config[=flags]] [options]\n\n")
    with pytest.raises(SystemExit):
        main([command, "--model", "GPFL", "--help"])
    assert capsys.readouterr().out.startswith(f"usage: fedlight {command} [options]\n\n")


def test_fit_help_lists_logger_values_run_options_and_classes_a_user_can_pass(
        capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")  # narrower than the longest class path
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    out = capsys.readouterr().out
    text = " ".join(out.split())
    assert ("--trainer.logger LOGGER, --trainer.logger+ LOGGER csv (always on), plus "
            "tensorboard and / or wandb: one name or a list, e.g. [tensorboard, wandb]. (type: "
            "{csv,tensorboard,wandb} | list[{csv,tensorboard,wandb}] | bool, default: csv)"
            ) in text
    assert "\nrun options:\n  --ckpt_path" in out and "return its summary:" not in out
    assert "\nThe method: --model NAME" in out and "Base class of every" not in out
    listed = re.findall(r"fedlight(?:\.\w+)+", text.split("known subclasses: ", 1)[1])
    assert "fedlight.GPFL" in listed and "fedlight.server.FedAdam" in listed
    for base in ("fedlight.FederatedClient", "fedlight.federation.probes.Probe",
                 "fedlight.server.ServerRule", "ServerOptimizer",
                 "AdaptiveServerOptimizer", "GatheringRule"):
        assert base not in text
    whole_on_a_line = {name for line in out.splitlines()
                       for name in re.findall(r"fedlight(?:\.\w+)+", line)}
    assert set(listed) <= whole_on_a_line  # wrapped between names, never inside one


@pytest.mark.parametrize("value, loggers", [
    ("csv", ["csv"]), ("wandb", ["csv", "wandb"]), ("[tensorboard, wandb]",
                                                     ["csv", "tensorboard", "wandb"]),
    ("true", ["csv"]), ("false", ["csv"])])
def test_every_form_of_trainer_logger_is_still_accepted(value, loggers, tmp_path):
    config = read_config(DIRICHLET, ["--trainer.logger", value,
                                     "--trainer.default_root_dir", str(tmp_path)])
    assert config.trainer.loggers == loggers


def test_a_typo_in_a_yaml_file_names_the_file(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FEDLIGHT_DEBUG", raising=False)
    typo = tmp_path / "typo.yaml"
    typo.write_text("data:\n  sed: 1\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", DIRICHLET, "-c", str(typo)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert str(typo) in err and "'data.sed'" in err and "did you mean 'data.seed'?" in err


@pytest.mark.parametrize("option, value", [
    ("rounds", "0"), ("local_epochs", "0"), ("batch_size", "0"), ("eval_every", "0"),
    ("eval_batch_size", "0"), ("checkpoint_every", "0"), ("workers_per_device", "0"),
    ("join_ratio", "0"), ("drop_rate", "1.5"), ("threads", "0"), ("batched_clients", "0"),
    ("gradient_clip_val", "-1"), ("strategy", "fsdp"), ("precision", "64-true"),
    ("max_local_steps", "0"), ("report_last", "0")])
def test_a_bad_trainer_value_names_its_option(option, value, capsys, monkeypatch):
    monkeypatch.delenv("FEDLIGHT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", DIRICHLET, f"--trainer.{option}", value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: trainer.{option}") and value in err, err


def test_a_valueerror_raised_inside_torch_keeps_its_traceback(tmp_path, capsys, monkeypatch):
    """Not a user error: the traceback says where it happened (here a training step that
    hands torch labels of the wrong size, as a bug would)."""
    from fedlight.clients import FedAvg

    monkeypatch.delenv("FEDLIGHT_DEBUG", raising=False)

    def broken_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y[:1])  # torch raises ValueError on the sizes

    monkeypatch.setattr(FedAvg, "training_step", broken_step)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", DIRICHLET, "--model.init_args.backbone", "mlp",
              "--data.num_clients", "2", "--trainer.rounds", "1", "--trainer.devices", "1",
              "--trainer.progress_bar", "false", "--trainer.verbose", "false",
              "--trainer.default_root_dir", str(tmp_path)])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "in broken_step" in err
    assert err.strip().splitlines()[-1].startswith("ValueError: Expected input batch_size")


def test_a_config_error_is_one_line_with_exit_code_2(capsys, monkeypatch):
    monkeypatch.delenv("FEDLIGHT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", DIRICHLET, "--model.init_args.lr", "-1"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "error: lr must be positive, got -1.0\n"
