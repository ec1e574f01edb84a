"""The job types Engram's one worker runs: adding one is one line here."""

from __future__ import annotations

from processor.jobs import consolidation, context_check, curator, extraction, inquisitor, remember, reviews
from processor.jobs.base import JobType
from processor.jobs.extraction import OutputLimits


def built_in_job_types(output_limits: OutputLimits | None = None) -> tuple[JobType, ...]:
    """Every built-in job type, each carrying its own handler, priority and "when is it due"."""
    return (
        extraction.job_type(output_limits),
        remember.JOB_TYPE,
        reviews.JOB_TYPE,
        curator.JOB_TYPE,
        consolidation.SWEEP_TYPE,
        consolidation.CONSOLIDATE_TYPE,
        context_check.JOB_TYPE,
        inquisitor.JOB_TYPE,
    )
