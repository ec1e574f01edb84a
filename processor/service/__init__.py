"""Service: the running processor's mechanisms — its loop, memory thread, pid lock, control plane, signals and units.

What they are wired into (the routes of status, the viewer and recall) is ``processor/lifecycle.py``'s, above this
folder and above what it wires.
"""
