"""The shared database's side of shared memory: its schema (versioned migrations) and every SQL statement sent to it.

Nothing outside ``processor/share/`` knows Postgres; nothing outside this folder holds Postgres SQL.
"""
