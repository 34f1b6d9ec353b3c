"""A command listener that keeps every command a client sends, as (name, collection)."""

from __future__ import annotations

from pymongo import monitoring


class SentCommands(monitoring.CommandListener):
    """The commands sent, in order, as (command name, the collection it names)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def count(self, name: str) -> int:
        """How many ``name`` commands were sent."""
        return sum(sent == name for sent, _ in self.sent)

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.sent.append((event.command_name, str(event.command.get(event.command_name))))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass
