"""The hooks' kit: what Engram's hooks and the processor share, in the standard library alone.

``hook_io`` (a hook's input and output: each agent's events and answers, Engram's files for the session, the
fence, what was told), ``tool_keys`` (what a call works on), ``failure_keys`` (how a call failed), ``project``
(the project a folder belongs to), ``control`` (the running processor, as a hook reaches it). It imports nothing
of Engram: the hooks run it with ``python -I -S`` and import its modules flat (``import hook_io``) from this
folder, so this ``__init__`` is never on a hook's path.
"""
