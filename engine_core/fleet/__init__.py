"""What a serving process runs beside passes: the dispatched-step worker, recovery of
lost runs, in-process timers and the waiters of ``engine.result``."""
