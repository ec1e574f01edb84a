"""The local web viewer (`engram open`): what Engram remembers, what it injected and what it spent.

Served under ``/ui/`` by the processor's loopback control plane (``app.Viewer.handle`` is the
control server's ``ui`` handler); login and cookies in ``auth``; templates and static files ship in
this package. ``serve`` wires it to a processor or, with none running, serves it read-only.
"""
