"""What every wing of the engine shares and no user imports: value conversion and
checks, durations, options, the run's journal, the lifecycle log, store outages,
background tasks and periodic loops, the ``Runtime`` the mechanisms work against, and
the status a run is folded into (``RunStatus`` and the rest are public from
``engine_core``)."""
