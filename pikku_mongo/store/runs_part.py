"""What the parts that read and write runs share (:class:`RunsPart`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pymongo.asynchronous.collection import AsyncCollection

from engine_core.records import RunRecord
from pikku_mongo.store.dedup_ops import DedupOps
from pikku_mongo.store.key_ops import KeyOps
from pikku_mongo.store.owned import Owned
from pikku_mongo.store.targeting import Targeting
from pikku_mongo.wire.causal import CausalReads
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.skew import SkewBound
from pikku_mongo.writes.batcher import Batcher


@dataclass(eq=False, kw_only=True)
class RunsPart:
    """The ``runs`` collection and what writing it takes: its group commit, the dedup
    claims a start takes, the turns a run joining a fair line takes, the line index
    (when targeted polling is on), causal reads, the clock-skew bound, and what runs own."""

    runs: AsyncCollection[Doc]
    run_writes: Batcher
    dedup: DedupOps
    keys: KeyOps
    #: The line index, when targeted polling is on.
    targeting: Targeting
    reads: CausalReads
    skew: SkewBound
    #: What runs own outside their documents (stamped for TTL and back, see ``owned``).
    owned: Owned

    async def lined_up(self, run: RunRecord) -> RunRecord:
        """``run`` as it is written: one that joins a fair line as it is (``queued`` on a
        queue, not delayed) with its turn taken first (2 commands)."""
        if not run.fair or run.queue is None or run.status != "queued" or run.not_before:
            return run
        return replace(run, queue_turn=await self.keys.take_turn(run.queue, run.queue_key))
