"""Test support: the MongoDB-wire test servers (:mod:`tests.support.servers`), the fault
proxy, the fleet of worker processes."""
