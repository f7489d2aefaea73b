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
