"""Progress with an ETA: the run's (at the pace of its rounds so far), a long round's clients
done on a terminal, one line per evaluated round in a log; and the summary's window label.
Every time comes from an injected clock."""

from __future__ import annotations

from fedlight.federation.outputs.progress import (
    WITHIN_ROUND_SECONDS,
    RoundProgress,
    duration,
    eta,
    final_table,
)
from fedlight.federation.outputs.summary import summarize


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def row(round_number):
    return {"round": round_number, "personalized_accuracy": 0.5, "global_accuracy": 0.25,
            "train_loss": 1.0}


def test_durations_and_etas_read_as_a_clock():
    assert [duration(s) for s in (4.4, 59.6, 61, 3725)] == ["4s", "1:00", "1:01", "1:02:05"]
    assert eta(30.0, 3, 7) == "ETA 1:10"  # 10 s a round, 7 to go
    assert eta(0.0, 0, 7) == "ETA -"
    assert eta(30.0, 3, 0) == "ETA 0s"


def test_a_log_gets_one_line_per_evaluated_round_with_the_runs_eta(capsys):
    clock = Clock()
    progress = RoundProgress(10, plain=True, clock=clock)
    with progress:
        progress.advance_to(0)
        clock.now += 20.0
        progress.update(1, row(1))
        clock.now += 20.0
        progress.update(2, row(1))  # round 2 not evaluated: no line
        clock.now += 20.0
        progress.update(3, row(3))
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "round 1/10  pers 0.5000  glob 0.2500  loss 1.0000  20.0s  ETA 3:00",
        "round 3/10  pers 0.5000  glob 0.2500  loss 1.0000  60.0s  ETA 2:20"]


def test_a_resumed_runs_eta_counts_its_own_rounds_only(capsys):
    clock = Clock()
    progress = RoundProgress(10, plain=True, clock=clock)
    progress.advance_to(8)  # resumed at round 8: the 8 rounds before took no time here
    clock.now += 5.0
    progress.update(9, row(9))
    assert capsys.readouterr().out.strip().endswith("5.0s  ETA 5s")


def test_a_long_round_shows_its_clients_done_on_a_terminal(capsys):
    clock = Clock()
    progress = RoundProgress(4, plain=False, clock=clock)
    progress.advance_to(0)
    progress.update(1, row(1))
    progress.start_round()
    progress.client_done(1, 20)  # the round has just started: nothing within it yet
    assert "clients" not in progress.status
    clock.now += WITHIN_ROUND_SECONDS
    progress.client_done(5, 20)
    assert progress.status.endswith("round 2: clients 5/20")
    progress.update(2, row(2))  # the round ended: its client count goes
    assert "clients" not in progress.status and "ETA" in progress.status
    assert capsys.readouterr().out == ""  # no plain lines on a terminal


def test_a_log_gets_no_within_round_lines(capsys):
    clock = Clock()
    progress = RoundProgress(4, plain=True, clock=clock)
    progress.start_round()
    clock.now += 60.0
    progress.client_done(5, 20)
    assert "clients" not in progress.status and capsys.readouterr().out == ""


def test_the_summary_window_says_what_it_averaged():
    history = [{"round": r, "personalized_accuracy": 0.1 * r, "global_accuracy": 0.2}
               for r in (1, 2)]
    summary = summarize(history, {}, last=10)
    assert summary["report_last"] == 10 and summary["report_window"] == 2
    table = final_table(summary)
    assert "personalized_accuracy, mean of the last 2 evaluations" in table
    assert "last-10" not in table
    one = final_table(summarize(history[:1], {}, last=10))
    assert "personalized_accuracy, mean of the last evaluation" in one
    full = summarize([{"round": r, "personalized_accuracy": 0.5} for r in range(1, 13)], {},
                     last=10)
    assert full["report_window"] == 10
