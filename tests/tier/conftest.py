"""Fixtures for the API-tier tests: pinned worker processes of the shop's fleet on the
MongoDB test server (a database of the test's own, as the chaos tests make it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.conftest import chaos_uri  # noqa: F401 (a fixture: the test's database)
from tests.support.fleet import Fleet, fleet_of


@pytest.fixture
def fleet(chaos_uri: str, tmp_path: Path) -> Iterator[Fleet]:  # noqa: F811
    with fleet_of("tests.tier.worker", chaos_uri, tmp_path) as made:
        yield made
