"""Project identity: the git repository a message's cwd belongs to (``processor/hook_kit/project.py``, the one
implementation the hooks share), cached: capture asks once a line.
"""

from __future__ import annotations

import functools

from processor.hook_kit import project as _project

project_root = functools.lru_cache(maxsize=4096)(_project.project_root)
