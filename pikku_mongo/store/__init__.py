"""The store: ``MongoStore`` and the parts it is built from, one per collection or
concern (runs, steps and the queue, flow control, schedules, forks, streams, workers,
dedup claims, listing, the indexes of queued work for targeted polling, migrations).
``MongoStore`` is its public name.

Collections (``prefix`` + name):

* ``runs``: ``_id`` = run id; the control plane of a run's passes (status, token,
  pass counter, the run's lease, ``pending_pass``, ``inflight`` keyed by a digest of the
  step key, and the ``journal`` of step outcomes not yet copied to their step records).
  See :mod:`pikku_mongo.store.run_ops`.
* ``steps``: one document per step, ``_id`` built from (run_id, key); the attempt
  history is embedded. See :mod:`pikku_mongo.store.step_ops`.
* ``events``: ``_id`` = event id (sortable by send time); consumed oldest first.
* ``leases``: ``{_id: key, holder, token, expires_us, expires_at}`` (the store-wide
  recovery lease); queries judge ``expires_us``; the BSON date ``expires_at`` only feeds
  a TTL index that removes the document a day after the lease ended (see ``indexes``).
* ``schedules``: ``_id`` = schedule name; its timing, input and next fire. See
  :mod:`pikku_mongo.store.schedule_ops`.
* ``meta``: the storage format version (see :mod:`pikku_mongo.store.migrations`).
* ``forks``: ``_id`` = a fork's run id, while the fork is being made (its steps
  written, its run not yet): see :mod:`pikku_mongo.store.fork_ops`.
* ``dedup``: ``_id`` = a (queue, dedup id) key; the run holding it (see
  :mod:`pikku_mongo.store.dedup_ops`).
* ``streams`` and ``heartbeats``: a run's stream entries, one document each, and its
  steps' last heartbeats. See :mod:`pikku_mongo.store.stream_ops`.
* ``values`` and ``updates``: the values a run published (one document per key) and the
  updates sent to it, kept with their answers. See :mod:`pikku_mongo.store.value_ops`
  and :mod:`pikku_mongo.store.update_ops`.
* ``jobs`` and ``lines``: with targeted polling, one entry per claimable queue job (by
  step function and due time) and per run waiting in a queue's line. See
  :mod:`pikku_mongo.store.job_index` and :mod:`pikku_mongo.store.line_index`.
* ``queues``: ``_id`` = queue name; each queue's admission state, replaced by
  compare-and-set on its version. See :mod:`pikku_mongo.store.queue_ops`.
* ``offloaded.files`` and ``offloaded.chunks``: the GridFS bucket of the values past
  ``offload_over``. See :mod:`pikku_mongo.store.offload_ops`.
* ``qkeys`` and ``debounce``: per (queue, key) its fair turn and ``key_rate`` window,
  per (workflow, debounce key) its window. See :mod:`pikku_mongo.store.key_ops`.
"""

from pikku_mongo.store.mongo_store import MongoStore

__all__ = ["MongoStore"]
