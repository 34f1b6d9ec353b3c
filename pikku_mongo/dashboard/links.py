"""The dashboard's navigation and its URLs: :data:`NAV` (the top-level pages) and
:class:`Links` (every page's path under the path the dashboard is mounted at)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode


@dataclass(frozen=True)
class NavItem:
    """A top-level page: its route name, its label and its path."""

    name: str
    label: str
    path: str


#: The top navigation.
NAV: tuple[NavItem, ...] = (
    NavItem("runs", "Runs", "/runs"),
    NavItem("queues", "Queues", "/queues"),
    NavItem("schedules", "Schedules", "/schedules"),
    NavItem("workers", "Workers", "/workers"),
)


class Links:
    """URLs of the dashboard's pages, under the path it is mounted at."""

    def __init__(self, root: str) -> None:
        self.root = root

    def runs(self, query: str = "") -> str:
        """The runs list, with ``query`` (``?...``) as its filters."""
        return f"{self.root}/runs{query}"

    def run(self, run_id: str, **extra: str) -> str:
        """A run's page: the id travels URL-encoded in the query, whatever it holds."""
        return f"{self.root}/run?{urlencode({'id': run_id, **extra})}"

    def confirm(self) -> str:
        """The confirm page of an action (a GET form's target)."""
        return f"{self.root}/run/confirm"

    def action(self) -> str:
        """Where confirmed actions are posted."""
        return f"{self.root}/run/action"

    def bulk_confirm(self) -> str:
        """The confirm page of a bulk action on the runs list (a GET form's target)."""
        return f"{self.root}/runs/confirm"

    def bulk_action(self) -> str:
        """Where confirmed bulk actions are posted."""
        return f"{self.root}/runs/action"

    def queues(self) -> str:
        """The queues page."""
        return f"{self.root}/queues"

    def schedules(self, **extra: str) -> str:
        """The schedules page (``done`` and ``name`` say what an action just did)."""
        query = f"?{urlencode(extra)}" if extra else ""
        return f"{self.root}/schedules{query}"

    def schedule_confirm(self) -> str:
        """The confirm page of a schedule action (a GET form's target)."""
        return f"{self.root}/schedules/confirm"

    def schedule_action(self) -> str:
        """Where confirmed schedule actions are posted."""
        return f"{self.root}/schedules/action"

    def workers(self) -> str:
        """The workers page."""
        return f"{self.root}/workers"

    def login(self) -> str:
        """The login form."""
        return f"{self.root}/login"

    def logout(self) -> str:
        """Where logging out is posted."""
        return f"{self.root}/logout"

    def static(self, name: str) -> str:
        """A file served from the package's ``static/`` folder."""
        return f"{self.root}/static/{name}"

    def page(self, item: NavItem) -> str:
        """A top-level page of the navigation."""
        return f"{self.root}{item.path}"
