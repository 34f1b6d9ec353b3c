"""The ``Engine``'s parts: its ``Host`` (this process's side of the engine: the
registries, the slots, the timers and the mechanisms it starts), starting runs, and the
schedule and repair halves of its API. Users import ``Engine`` from ``engine_core``."""
