"""The places where fedlight relies on another package beyond its public interface, one module
per package relied on.

Everything here reads or overrides something the package does not promise to keep (a private
method, the wording of a message). Each module names what it depends on and why no public
interface serves; ``tests/test_compat.py`` checks every assumption against the installed
versions and fails with the name of the one that broke, and ``pyproject.toml`` pins the upper
bounds those tests passed with. Nothing outside this package may use an underscore name of
lightning, jsonargparse, flwr, wandb or torch.amp.

* :mod:`~fedlight.compat.lightning_cli`: LightningCLI's ``__init__`` steps fedlight disables;
* :mod:`~fedlight.compat.jsonargparse_errors`: jsonargparse's error text read into its parts;
* :mod:`~fedlight.compat.jsonargparse_help`: jsonargparse's help, as a user can act on it;
* :mod:`~fedlight.compat.flower_internals`: what a grid without a SuperLink must stamp;
* :mod:`~fedlight.compat.grad_scaler`: a GradScaler's growth counter.
"""
