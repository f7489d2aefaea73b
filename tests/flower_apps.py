"""What the test Flower apps (tests/flower_hostile/, tests/flower_stalling/) share: fedlight's
ClientApp with its train handler replaced, its query and evaluate answered as fedlight does."""

from __future__ import annotations

from collections.abc import Callable

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

Handler = Callable[[Message, Context], Message]


def with_train(inner: Handler, train: Handler) -> ClientApp:
    """A ClientApp that answers query and evaluate messages as inner does and train messages
    with train (which may call inner)."""
    app = ClientApp()

    @app.query()
    def query(message: Message, context: Context) -> Message:
        return inner(message, context)

    @app.evaluate()
    def evaluate(message: Message, context: Context) -> Message:
        return inner(message, context)

    app.train()(train)
    return app
