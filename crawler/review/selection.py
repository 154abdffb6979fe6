"""Which crawls a command reports: :func:`select_crawls` (``--crawl ID``, ``--job [JOB]`` or
neither: the latest crawl; ``--worker W`` narrows a distributed crawl to one worker) returns
the ids and a one-line note for stderr.

A crawl resumed from ``JOBDIR`` records one ``crawls`` row per run, tied by ``crawls.job``
(revision 0007; a database not yet upgraded reads as having no jobs). A distributed crawl
records one row per worker and one ``distributed`` row for the whole crawl, all tied by
``crawls.job`` (the crawl's id) and ``parent_id`` (revision 0010): it is reported whole by
default, its workers' pages as one (:func:`distributed_family`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from crawler.storage import ReviewError, Run
from crawler.vocab import DISTRIBUTED

if TYPE_CHECKING:
    from crawler.review.crawldb import CrawlDB

LATEST_JOB = "latest"  # ``--job`` without an id; generated job ids are hex, never this word


@dataclass(frozen=True)
class Selection:
    """The crawls a command reports, oldest first, and the one-line note saying why."""

    crawl_ids: list[int]
    note: str
    job: str | None = None
    distributed: int | None = None  # the distributed crawl's own row, when reporting it whole

    @property
    def report_arg(self) -> int | list[int]:
        """What ``report.build_report`` takes: one id, or the list of a job's runs."""
        return self.crawl_ids[0] if len(self.crawl_ids) == 1 else list(self.crawl_ids)

    @property
    def label(self) -> str:
        if self.distributed is not None:
            return (f"distributed crawl {self.job} (crawl {self.distributed}: "
                    f"{_workers_phrase(len(self.crawl_ids))})")
        if self.job is None:
            return f"crawl {self.crawl_ids[0]}"
        return f"job {self.job} ({_crawls_phrase(self.crawl_ids)})"


def distributed_family(runs: list[Run], run: Run) -> tuple[Run, list[Run]] | None:
    """The ``distributed`` row and the worker rows (oldest first) of the distributed crawl
    ``run`` belongs to (its own row or one of its workers'); None for any other crawl."""
    by_id = {r.id: r for r in runs}
    parent = run if run.command == DISTRIBUTED else by_id.get(run.parent_id or -1)
    if parent is None:
        return None
    return parent, [r for r in runs if r.parent_id == parent.id]


def select_crawls(db: CrawlDB, crawl_id: int | None = None,
                  job: str | None = None, worker: str | None = None) -> Selection:
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
        if worker is not None:
            raise ReviewError("--worker narrows a distributed crawl picked by --crawl (or the "
                              "latest); give --crawl ID instead of --job")
        return _select_job(db, runs, job)
    return _select_crawl(db, runs, crawl_id, worker)


def _select_crawl(db: CrawlDB, runs: list[Run], crawl_id: int | None,
                  worker: str | None = None) -> Selection:
    by_id = {run.id: run for run in runs}
    latest = runs[-1].id
    if crawl_id is not None and crawl_id not in by_id:
        db.crawl(crawl_id)  # raises: unknown crawl, naming those that exist
    run = by_id[latest if crawl_id is None else crawl_id]
    family = distributed_family(runs, run)
    if family is not None and (worker is not None or crawl_id is None
                               or run.command == DISTRIBUTED):
        return _select_distributed(db, runs, family, worker, crawl_id)
    if worker is not None:
        raise ReviewError(f"--worker narrows a distributed crawl, and crawl {run.id} is not "
                          "one (nor part of one)")
    if family is not None:  # --crawl ID of one worker's row
        parent = family[0]
        if not db.has_pages(run.id):
            raise ReviewError(f"crawl {run.id} (worker {run.worker} of distributed crawl "
                              f"{parent.job}) stored and dropped nothing; --crawl {parent.id} "
                              "reports the whole crawl")
        return Selection([run.id], f"report of crawl {run.id} (as asked: worker {run.worker} "
                         f"of distributed crawl {parent.job}); --crawl {parent.id} for the "
                         "whole crawl")
    siblings = [r.id for r in runs if run.job is not None and r.job == run.job]
    if not db.has_pages(run.id):
        raise ReviewError(empty_crawl_message(db, runs, run, siblings))
    return Selection([run.id], _crawl_note(run, runs, crawl_id, siblings))


def _select_distributed(db: CrawlDB, runs: list[Run], family: tuple[Run, list[Run]],
                        worker: str | None, crawl_id: int | None) -> Selection:
    """A distributed crawl whole (its workers' rows as one), or one worker's row."""
    parent, workers = family
    key = parent.job
    if worker is not None:
        run = _find_worker(workers, worker, key)
        if not db.has_pages(run.id):
            raise ReviewError(f"worker {run.worker} of distributed crawl {key} (crawl {run.id}) "
                              "stored and dropped nothing; leave --worker out for the whole "
                              "crawl")
        return Selection([run.id], f"report of worker {run.worker} of distributed crawl {key} "
                         f"(crawl {run.id}); without --worker: the whole crawl (crawl "
                         f"{parent.id})")
    ids = [r.id for r in workers]
    if not any(db.has_pages(i) for i in ids):
        raise ReviewError(f"distributed crawl {key} (crawl {parent.id}, "
                          f"{_workers_phrase(len(ids))}) has no pages yet"
                          f"{_pages_hint(db, runs)}")
    how = "the latest crawl" if crawl_id is None else "as asked"
    note = (f"report of distributed crawl {key} ({how}: crawl {parent.id}, "
            f"{_workers_phrase(len(ids))}: {_crawls_phrase(ids)} as one); --worker ID for one "
            "worker")
    return Selection(ids, note, key, distributed=parent.id)


def _find_worker(workers: list[Run], wanted: str, key: str | None) -> Run:
    """The worker row named by its membership id, a unique part of it, or its crawl id."""
    exact = [r for r in workers if r.worker == wanted or str(r.id) == wanted]
    found = exact or [r for r in workers if r.worker and wanted in r.worker]
    if len(found) == 1:
        return found[0]
    names = ", ".join(f"{r.worker} (crawl {r.id})" for r in workers) or "none"
    why = "matches several" if found else "matches none"
    raise ReviewError(f"--worker {wanted!r} {why} of distributed crawl {key}'s workers: {names}")


def _workers_phrase(count: int) -> str:
    return f"{count} worker{'s' if count != 1 else ''}"


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
    ids = [run.id for run in runs if run.job == job and run.command != DISTRIBUTED]
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
