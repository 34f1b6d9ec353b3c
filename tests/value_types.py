"""Types the value tests declare (at module level, so annotations resolve)."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal

from pydantic import BaseModel


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Parcel:
    weight: Decimal
    sent: date
    tags: tuple[str, ...] = ()
    flags: frozenset[int] = field(default_factory=frozenset)


class Line(BaseModel):
    sku: str
    qty: int


class OrderIn(BaseModel):
    id: uuid.UUID
    placed: datetime
    total: Decimal
    colour: Colour
    lines: list[Line]
    sizes: set[int]
    pair: tuple[int, str]


class Receipt(BaseModel):
    order: uuid.UUID
    at: datetime
    parcel: Parcel | None = None
