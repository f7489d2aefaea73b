"""The private uses of other libraries that fedlight.compat isolates still work as it assumes:
each test fails when the upstream changes them."""

import pytest
import torch

from fedlight.compat import restart_growth


def test_a_gradscalers_state_dict_restarts_its_growth_counter():
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=3)
    assert "_growth_tracker" in scaler.state_dict()
    restart_growth(scaler, 1024.0)
    assert scaler.get_scale() == 1024.0
    assert scaler.state_dict()["_growth_tracker"] == 0


def test_flower_message_ids_runs_and_task_identity_are_where_compat_puts_them():
    pytest.importorskip("flwr")
    from flwr.app import Message, RecordDict

    from fedlight.compat import empty_flower_run, set_task_identity, stamp_message_id

    set_task_identity(7, 1, 1)
    message = Message(RecordDict(), dst_node_id=1000, message_type="train")
    stamp_message_id(message, "abc")
    assert message.metadata.message_id == "abc"
    reply = Message(RecordDict(), reply_to=message)
    assert reply.metadata.reply_to_message_id == "abc"
    assert empty_flower_run(7).run_id == 7


def test_only_the_command_line_imports_the_command_line():
    """No import circle through fedlight.cli: the Flower apps and fedlight interpolate read
    configs with fedlight.config, never with the CLI class."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "fedlight"
    importers = []
    for path in package.rglob("*.py"):
        if path == package / "cli.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if "fedlight.cli" in names:
                importers.append(str(path.relative_to(package)))
    assert importers == []
