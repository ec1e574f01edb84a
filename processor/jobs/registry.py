"""The job types Engram's one worker runs: adding one (the curator, the inquisitor) is one line here."""

from __future__ import annotations

from processor.jobs import curator, extraction, inquisitor, remember, reviews
from processor.jobs.base import JobType
from processor.jobs.extraction import OutputLimits


def built_in_job_types(output_limits: OutputLimits | None = None) -> tuple[JobType, ...]:
    """Every built-in job type, each carrying its own handler, priority and "when is it due"."""
    return (
        extraction.job_type(output_limits),
        remember.JOB_TYPE,
        reviews.JOB_TYPE,
        curator.JOB_TYPE,
        inquisitor.JOB_TYPE,
    )
