"""Which crawls a command reports: :func:`select_crawls` (``--crawl ID``, ``--job [JOB]`` or
neither: the latest crawl) returns the ids and a one-line note for stderr.

A crawl resumed from ``JOBDIR`` records one ``crawls`` row per run, tied by ``crawls.job``
(revision 0007; a database not yet upgraded reads as having no jobs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from crawler.storage import ReviewError, Run

if TYPE_CHECKING:
    from crawler.review.crawldb import CrawlDB

LATEST_JOB = "latest"  # ``--job`` without an id; generated job ids are hex, never this word


@dataclass(frozen=True)
class Selection:
    """The crawls a command reports, oldest first, and the one-line note saying why."""

    crawl_ids: list[int]
    note: str
    job: str | None = None

    @property
    def report_arg(self) -> int | list[int]:
        """What ``report.build_report`` takes: one id, or the list of a job's runs."""
        return self.crawl_ids[0] if len(self.crawl_ids) == 1 else list(self.crawl_ids)

    @property
    def label(self) -> str:
        if self.job is None:
            return f"crawl {self.crawl_ids[0]}"
        return f"job {self.job} ({_crawls_phrase(self.crawl_ids)})"


def select_crawls(db: CrawlDB, crawl_id: int | None = None,
                  job: str | None = None) -> Selection:
    """The crawls to report for ``--crawl ID``, ``--job [ID]`` or neither.

    * neither: the latest crawl; the note says so, and when that crawl is one run of a JOBDIR
      job with several runs, that ``--job`` reports them all as one;
    * ``crawl_id``: that crawl;
    * ``job``: every run of that job (:data:`LATEST_JOB`: of the newest crawl that has a job).

    Raises :class:`ReviewError` (one line) for both given, an unknown crawl or job, a job asked
    of crawls that ran without JOBDIR, and a chosen crawl or job without pages — naming the
    crawls that have pages and the option to use.
    """
    if crawl_id is not None and job is not None:
        raise ReviewError("--crawl and --job each pick the crawls to report; give one of them")
    runs = db.runs()
    if not runs:
        raise ReviewError(f"database {db.masked_url} records no crawl")
    if job is not None:
        return _select_job(db, runs, job)
    return _select_crawl(db, runs, crawl_id)


def _select_crawl(db: CrawlDB, runs: list[Run], crawl_id: int | None) -> Selection:
    by_id = {run.id: run for run in runs}
    latest = runs[-1].id
    if crawl_id is not None and crawl_id not in by_id:
        db.crawl(crawl_id)  # raises: unknown crawl, naming those that exist
    run = by_id[latest if crawl_id is None else crawl_id]
    siblings = [r.id for r in runs if run.job is not None and r.job == run.job]
    if not db.has_pages(run.id):
        raise ReviewError(empty_crawl_message(db, runs, run, siblings))
    return Selection([run.id], _crawl_note(run, runs, crawl_id, siblings))


def _crawl_note(run: Run, runs: list[Run], crawl_id: int | None, siblings: list[int]) -> str:
    if crawl_id is None:
        how = "the only crawl" if len(runs) == 1 else f"latest of {len(runs)}"
    else:
        how = f"as asked; the latest is {runs[-1].id}"
    parse = ", a scrapy parse run" if run.command == "parse" else ""
    note = f"report of crawl {run.id} ({how}{parse})"
    if len(siblings) > 1:
        note += (f"; it is run {siblings.index(run.id) + 1} of {len(siblings)} of JOBDIR job "
                 f"{run.job} ({_crawls_phrase(siblings)}): --job {run.job} reports them as one")
    elif len(runs) > 1:
        note += "; --crawl ID for another"
    return note


def _select_job(db: CrawlDB, runs: list[Run], job: str) -> Selection:
    jobs = [run.job for run in runs if run.job is not None]
    how = f"job {job}"
    if job == LATEST_JOB:
        if not jobs:
            raise ReviewError(_no_jobs_message(db, runs))
        job, how = jobs[-1], f"job {jobs[-1]} (the latest job)"
    ids = [run.id for run in runs if run.job == job]
    if not ids:
        known = ", ".join(dict.fromkeys(reversed(jobs))) if jobs else "none"
        raise ReviewError(f"unknown job {job!r} in {db.masked_url} (jobs, newest first: "
                          f"{known}); --job alone picks the latest")
    if not any(db.has_pages(crawl_id) for crawl_id in ids):
        raise ReviewError(f"job {job} has no pages: its runs ({_crawls_phrase(ids)}) stored and "
                          f"dropped nothing{_pages_hint(db, runs)}")
    note = f"report of {how}: {_crawls_phrase(ids)} as one; --crawl ID for one run"
    return Selection(ids, note, job)


def empty_crawl_message(db: CrawlDB, runs: list[Run], run: Run, siblings: list[int]) -> str:
    """``crawl 2 has no pages (a scrapy parse run); crawls with pages: 1; use --crawl 1``."""
    why = "a scrapy parse run" if run.command == "parse" else "it stored and dropped nothing"
    message = f"crawl {run.id} has no pages ({why})"
    job_pages = [i for i in siblings if i != run.id and db.has_pages(i)]
    if job_pages:
        return (f"{message}; other runs of its JOBDIR job {run.job} have pages "
                f"({_crawls_phrase(job_pages)}); use --job {run.job}")
    return message + _pages_hint(db, runs)


def _pages_hint(db: CrawlDB, runs: list[Run]) -> str:
    with_pages = db.crawls_with_pages()
    if not with_pages:
        return "; no crawl in this database has pages"
    hint = f"; crawls with pages: {_id_list(with_pages)}; use --crawl {with_pages[-1]}"
    job = next(run.job for run in runs if run.id == with_pages[-1])
    if job is not None and sum(run.job == job for run in runs) > 1:
        hint += f", or --job {job} for all runs of its JOBDIR job"
    return hint


def _no_jobs_message(db: CrawlDB, runs: list[Run]) -> str:
    message = f"no crawl in {db.masked_url} ran with JOBDIR, so none belongs to a job"
    if not db.records_jobs():
        message += " (its schema predates jobs: a new crawl into it adds them)"
    return message + f"; use --crawl ID (latest: {runs[-1].id})"


def _id_list(ids: list[int], shown: int = 10) -> str:
    text = ", ".join(map(str, ids[-shown:]))
    return text if len(ids) <= shown else f"… {text} ({len(ids)} in all)"


def _crawls_phrase(ids: list[int]) -> str:
    return f"crawl {ids[0]}" if len(ids) == 1 else f"crawls {_id_list(ids)}"
