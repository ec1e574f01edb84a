"""Jobs: the single LLM worker. A durable queue, extractor backends, ADD/UPDATE/NOOP, and the cost cap.

    runner = JobRunner(settings, stop_event)   # one per process; one worker thread
    runner.start()
    runner.on_messages_captured(session_id)    # from capture: evaluate micro-batch triggers
    runner.on_remember_files()                 # the remember folder changed
    runner.status(); runner.ping_info()        # `engram status`, GET /ping
    runner.stop()
"""

from processor.jobs.commands import dry_run, plan, run_once
from processor.jobs.extraction import OutputLimits
from processor.jobs.queue import (
    PRIORITY_CONTEXT_CHECK,
    PRIORITY_CURATOR,
    PRIORITY_EXTRACT,
    PRIORITY_INQUISITOR,
    PRIORITY_REMEMBER,
    JobContext,
    JobRejected,
    JobRunner,
    RetryLater,
    WorkerBusy,
    format_jobs_status,
    jobs_status,
)

__all__ = [
    "PRIORITY_CONTEXT_CHECK", "PRIORITY_CURATOR", "PRIORITY_EXTRACT", "PRIORITY_INQUISITOR", "PRIORITY_REMEMBER",
    "JobContext", "JobRejected", "JobRunner", "OutputLimits", "RetryLater", "WorkerBusy", "dry_run",
    "format_jobs_status", "jobs_status", "plan", "run_once",
]
