"""How runs enter and leave the fleet: starts, queues and their limits, admission from a
queue's line, delayed starts and deadlines."""
