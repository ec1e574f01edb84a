"""Jobs: the single LLM worker. Job types, a durable queue that runs them, the LLM gate, and status.

    runner = JobRunner(settings, stop_event)   # one per process; one worker thread
    runner.start()
    runner.on_messages_captured(session_id)    # from capture: ask the job types what is due
    runner.wake()                              # something changed (a remember request, a sweep now)
    runner.status(); runner.ping_info()        # `engram status`, GET /ping
    runner.stop()

The names below are imported on first use, not with the package: `engram status` formats the running
processor's answer with ``format_jobs_status`` and must not pay for the queue, the backends and apsw.
"""

from __future__ import annotations

from typing import Any

TYPE_CHECKING = False
if TYPE_CHECKING:
    from processor.jobs.base import DueCheck, DueJob, JobContext, JobRejected, JobType, RetryLater
    from processor.jobs.extraction import OutputLimits
    from processor.jobs.planning import dry_run, plan, run_once
    from processor.jobs.queue import JobRunner, WorkerBusy
    from processor.jobs.registry import built_in_job_types
    from processor.jobs.status import jobs_status
    from processor.jobs.status_text import format_jobs_status

_LAZY = {
    **dict.fromkeys(("DueCheck", "DueJob", "JobContext", "JobRejected", "JobType", "RetryLater"),
                    "processor.jobs.base"),
    "OutputLimits": "processor.jobs.extraction",
    **dict.fromkeys(("dry_run", "plan", "run_once"), "processor.jobs.planning"),
    **dict.fromkeys(("JobRunner", "WorkerBusy"), "processor.jobs.queue"),
    "built_in_job_types": "processor.jobs.registry",
    "jobs_status": "processor.jobs.status",
    "format_jobs_status": "processor.jobs.status_text",
}

__all__ = [
    "DueCheck", "DueJob", "JobContext", "JobRejected", "JobRunner", "JobType", "OutputLimits", "RetryLater",
    "WorkerBusy", "built_in_job_types", "dry_run", "format_jobs_status", "jobs_status", "plan", "run_once",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'processor.jobs' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value
