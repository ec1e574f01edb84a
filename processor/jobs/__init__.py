"""Jobs: the single LLM worker. Job types, a durable queue that runs them, the LLM gate, and status.

    runner = JobRunner(settings, stop_event)   # one per process; one worker thread
    runner.start()
    runner.on_messages_captured(session_id)    # from capture: ask the job types what is due
    runner.wake()                              # something changed (a remember request, a sweep now)
    runner.status(); runner.ping_info()        # `engram status`, GET /ping
    runner.stop()
"""

from processor.jobs.base import DueCheck, DueJob, JobContext, JobRejected, JobType, RetryLater
from processor.jobs.extraction import OutputLimits
from processor.jobs.planning import dry_run, plan, run_once
from processor.jobs.queue import JobRunner, WorkerBusy
from processor.jobs.registry import built_in_job_types
from processor.jobs.status import format_jobs_status, jobs_status

__all__ = [
    "DueCheck", "DueJob", "JobContext", "JobRejected", "JobRunner", "JobType", "OutputLimits", "RetryLater",
    "WorkerBusy", "built_in_job_types", "dry_run", "format_jobs_status", "jobs_status", "plan", "run_once",
]
