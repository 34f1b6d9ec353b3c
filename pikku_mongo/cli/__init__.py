"""``pikku-mongo``, the command line: see :mod:`pikku_mongo.cli.console`. ``main`` is the
console entry point (``python -m pikku_mongo.cli`` runs it too)."""

from pikku_mongo.cli.console import main

__all__ = ["main"]
