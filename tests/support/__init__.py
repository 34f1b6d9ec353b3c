"""Test support: the MongoDB-wire test servers (:mod:`tests.support.servers`)."""
