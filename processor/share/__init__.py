"""Shared memory: memories replicated between a person's machines and shared with teams through one PostgreSQL.

SQLite stays the hot path: capture, episodes, recollections and the hooks work offline. Changes leave
through an outbox the store's triggers fill (``processor/store/share.py``), are pushed and pulled by
``sync``, and land in the local store as episodes that rank like local ones. Only this package knows
Postgres; its SQL and migrations are in ``postgres/``.
"""
