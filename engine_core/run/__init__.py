"""One pass of a run: the driver, replay of recorded steps, the write path at step
boundaries, inline steps and their attempts, waits, transitions, keys and the context a
workflow body sees."""
