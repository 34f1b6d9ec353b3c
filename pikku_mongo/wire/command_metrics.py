"""``pikku.store.commands``: each MongoDB command a store's client sends, counted by
name (``find``, ``update``...) through the engine's metrics (nothing without an SDK)."""

from __future__ import annotations

from pymongo import monitoring

import engine_core.metrics as metrics


class CommandCounter(monitoring.CommandListener):
    """A command listener that counts commands started (``MongoStore.from_uri`` adds
    one; for a client of your own pass ``event_listeners=[CommandCounter()]``)."""

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        """Count the command."""
        metrics.store_command(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Nothing: a command is counted when it starts."""
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """Nothing: a command is counted when it starts."""
        pass
