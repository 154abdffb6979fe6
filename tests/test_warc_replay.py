"""Replay of the crawl's WARC files in a real pywb: every exchange, as the server sent it.

The demo site is crawled with ``WARC_OUTPUT`` (rotating, so revisits cross files). The site
server logs what it answered to each request (:class:`crawler.sitegen.server.Exchange`); each URL
the crawl fetched is then asked of pywb 2.10 as ``/COLL/TIMESTAMPid_/URL`` (``id_``: the
archived bytes, nothing rewritten; a revisit resolves to the original's payload) and must come
back as a capture with the status, ``Location`` and body SHA-1 the server sent. Three
collections:

* ``pywb``: the files added with ``wb-manager add`` (indexed by pywb itself);
* ``cdxj``: the files where the crawl left them, read through the crawl's own ``NAME.cdxj``
  beside each ``NAME.warc.gz`` (``index_paths`` = the directory);
* ``wacz``: the crawl's WACZ (``WARC_WACZ``), added with ``wb-manager add --unpack-wacz``.

The files are also read by two independent readers, warcio (``warcio check``) and FastWARC
(block and payload digests, revisits against the payloads archived; the same records per type as
warcio reads), and the WACZ is checked by ``wacz validate``.

pywb 2.10 pins ``redis==2.10.6`` (the project needs ``redis>=5``), so pywb, FastWARC and wacz live
in a tools venv of their own, ``.venv-tools/`` at the project root (``DEDUP_TOOLS_VENV`` moves
it), made once with pip (about 20 s) and reused; remade when an import fails or the pinned
list changes. Without the registry the tests skip, or fail with ``CI=true``.

Run with ``-s`` to see the replay table (URLs fetched and replayed, by status class and type).
"""

from __future__ import annotations

import fcntl
import hashlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from crawler import defaults
from crawler.sitegen import demo_site
from crawler.sitegen.server import Exchange, SiteServer
from tests.conftest import IN_CI, ROOT, free_port, run_crawl

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.slow

TOOLS_VENV = Path(os.environ.get("DEDUP_TOOLS_VENV") or ROOT / ".venv-tools")
TOOLS = ("pywb==2.10.*", "fastwarc", "wacz==0.6.*")
TOOLS_STAMP = "dedup-tools.txt"  # the list it was made with, written once pip succeeded
INSTALL_SECONDS = (60, 180)  # venv, pip: within the test's own timeout (300 s)
WAYBACK_START_SECONDS = 60
WARCIO = Path(sys.executable).with_name("warcio")  # the project's venv


# --- the tools venv ----------------------------------------------------------------------------


def tool(name: str) -> str:
    return str(TOOLS_VENV / "bin" / name)


def tools_ready() -> bool:
    """The venv was made from ``TOOLS`` and its packages import."""
    stamp = TOOLS_VENV / TOOLS_STAMP
    if not stamp.is_file() or stamp.read_text().split() != list(TOOLS):
        return False
    probe = subprocess.run([tool("python"), "-c", "import pywb, fastwarc, wacz"],
                           capture_output=True, timeout=120)  # fmt: skip
    return probe.returncode == 0


def unavailable(message: str) -> None:
    if IN_CI:
        pytest.fail(message + " (CI=true: the replay test must run)")
    pytest.skip(message)


def make_tools() -> str | None:
    """Make the tools venv afresh; the reason in one line when it cannot be made."""
    shutil.rmtree(TOOLS_VENV, ignore_errors=True)
    steps = ([sys.executable, "-m", "venv", str(TOOLS_VENV)],
             [tool("python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
              "--timeout", "30", "--retries", "2", *TOOLS])  # fmt: skip
    for step, seconds in zip(steps, INSTALL_SECONDS, strict=True):
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=seconds)
        except subprocess.TimeoutExpired:
            return f"{' '.join(step[2:4])}: not done in {seconds} s"
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
            return (errors or done.stderr.strip().splitlines() or ["failed"])[-1][:300]
    (TOOLS_VENV / TOOLS_STAMP).write_text("\n".join(TOOLS) + "\n")
    return None


@pytest.fixture(scope="session")
def tools_venv() -> Path:
    """``.venv-tools`` with pywb, FastWARC and wacz (made once; a lock for parallel sessions)."""
    key = hashlib.sha1(bytes(TOOLS_VENV)).hexdigest()[:8]
    with (Path(tempfile.gettempdir()) / f"dedup-tools-{key}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        if not tools_ready():
            reason = make_tools()
            if reason is not None or not tools_ready():
                unavailable(f"cannot install {' '.join(TOOLS)} into {TOOLS_VENV} "
                            f"(is the package registry reachable?): {reason or 'imports fail'}")
    return TOOLS_VENV


# --- the crawl ---------------------------------------------------------------------------------


@dataclass
class ReplayCrawl:
    """The crawl's WARC directory, its start time and what the server answered, per URL."""

    warc_dir: Path
    timestamp: str  # 14 digits, UTC: pywb replays the capture closest to it
    exchanges: dict[str, Exchange]  # URL (from the Host header) -> the first answer

    def files(self, pattern: str) -> list[Path]:
        return sorted(self.warc_dir.glob(pattern))


@pytest.fixture(scope="module")
def replay_crawl(tmp_path_factory) -> ReplayCrawl:
    """The demo site crawled with WARC output rotating every 200 kB (and a WACZ if this build
    has ``WARC_WACZ``), on a server of its own so that its log holds this crawl only."""
    workdir = tmp_path_factory.mktemp("warc-replay")
    warc_dir = workdir / "warc"
    settings: dict[str, object] = {"WARC_OUTPUT": f"{warc_dir}/", "WARC_MAX_SIZE": 200_000}
    if hasattr(defaults, "WARC_WACZ"):
        settings["WARC_WACZ"] = True
    timestamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    with SiteServer(demo_site()) as server:
        run = run_crawl(workdir, urls=[server.base_url + "/"], settings=settings)
        answered = list(server.exchanges)
    assert run.returncode == 0, run.stderr[-3000:]
    exchanges: dict[str, Exchange] = {}
    for exchange in answered:
        exchanges.setdefault(f"http://{exchange.host}{exchange.target}", exchange)
    assert len(exchanges) >= 190, f"the crawl fetched only {len(exchanges)} URLs"
    return ReplayCrawl(warc_dir, timestamp, exchanges)


# --- pywb --------------------------------------------------------------------------------------


def run_tool(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args[:3])}: {done.stdout[-1500:]}{done.stderr[-1500:]}"
    return done


def index_of(warc: Path) -> Path:
    """``NAME.cdxj`` beside ``NAME.warc.gz``."""
    return warc.with_name(warc.name.removesuffix(".warc.gz") + ".cdxj")


def cdxj_config(crawl: ReplayCrawl) -> str:
    """The ``cdxj`` collection of config.yaml: the crawl's files read through its own indexes."""
    folder = str(crawl.warc_dir)
    return (f"collections:\n  cdxj:\n    index_paths: {folder}/\n"
            f"    archive_paths: {folder}/\n")  # fmt: skip


@contextmanager
def wayback(root: Path, port: int) -> Iterator[str]:
    """``wayback`` serving the collections of ``root`` on 127.0.0.1; yields its base URL."""
    log = (root / "wayback.log").open("wb")
    command = [tool("wayback"), "-b", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(command, cwd=root, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + WAYBACK_START_SECONDS
        while not port_answers(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                text = (root / "wayback.log").read_text(errors="replace")[-2000:]
                raise AssertionError(f"wayback did not start on port {port}: {text}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def port_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def pywb(tools_venv, replay_crawl, tmp_path_factory) -> Iterator[tuple[str, dict[str, str]]]:
    """pywb on a free port: ``(host:port, {collection: why it is not loaded, or ""})``."""
    root = tmp_path_factory.mktemp("pywb")
    warcs = [str(p) for p in replay_crawl.files("*.warc.gz")]
    assert warcs, f"no WARC file in {replay_crawl.warc_dir}"
    run_tool([tool("wb-manager"), "init", "pywb"], root)
    run_tool([tool("wb-manager"), "add", "pywb", *warcs], root)
    loaded = {"pywb": ""}
    loaded["cdxj"] = "" if replay_crawl.files("*.cdxj") else "no .cdxj file beside the WARCs"
    if not loaded["cdxj"]:
        (root / "config.yaml").write_text(cdxj_config(replay_crawl))
    loaded["wacz"] = load_wacz(root, replay_crawl.files("*.wacz"))
    with wayback(root, free_port()) as address:
        yield address, loaded


def load_wacz(root: Path, waczs: list[Path]) -> str:
    """The ``wacz`` collection: the packages unpacked by ``wb-manager``; why not, or ""."""
    if len(waczs) != 1:
        return f"{len(waczs)} .wacz files (one expected)"
    for args in (["init", "wacz"], ["add", "--unpack-wacz", "wacz", str(waczs[0])]):
        done = subprocess.run([tool("wb-manager"), *args], cwd=root, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        if done.returncode != 0:
            return f"wb-manager {args[0]}: {(done.stderr or done.stdout)[-1000:]}"
    index = root / "collections" / "wacz" / "indexes" / "index.cdxj"
    if not index.is_file() or index.stat().st_size == 0:  # it only warns, and exits 0
        said = (done.stderr + done.stdout).strip()[-500:]
        return f"wb-manager add --unpack-wacz loaded no index (it reads indexes/*.cdx[.gz]): {said}"
    return ""


@dataclass
class Replayed:
    status: int
    location: str | None
    sha1: str
    archived: bool  # a capture answered (Memento-Datetime), not pywb's own "not found" page


def fetch(address: str, path: str) -> Replayed:
    """One GET, redirects not followed."""
    conn = http.client.HTTPConnection(address, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        return Replayed(response.status, response.getheader("Location"),
                        hashlib.sha1(body).hexdigest(),
                        response.getheader("Memento-Datetime") is not None)  # fmt: skip
    finally:
        conn.close()


def mismatch(exchange: Exchange, replayed: Replayed) -> str | None:
    """Why the replay differs from what the server sent, or None: status, ``Location`` and
    the body's SHA-1, a redirect's included (the writer never makes a 3xx a revisit, which
    pywb 2.10 would replay with an empty body)."""
    if not replayed.archived:
        return f"not in the archive (pywb {replayed.status}, sent {exchange.status})"
    if replayed.status != exchange.status:
        return f"status {replayed.status}, sent {exchange.status}"
    sent_location = exchange.headers.get("Location")
    if sent_location is not None and replayed.location != sent_location:
        return f"Location {replayed.location!r}, sent {sent_location!r}"
    if exchange.method == "GET" and replayed.sha1 != exchange.sha1:
        return "body differs"
    return None


def kind(exchange: Exchange) -> tuple[str, str]:
    """(status class, media type): a row of the replay table."""
    media = exchange.headers.get("Content-Type", "").split(";")[0].strip() or "-"
    return f"{exchange.status // 100}xx", media


def replay_table(crawl: ReplayCrawl, failed: dict[str, str]) -> str:
    fetched = Counter(kind(e) for e in crawl.exchanges.values())
    bad = Counter(kind(crawl.exchanges[url]) for url in failed)
    lines = [f"{'status':<7}{'type':<26}{'fetched':>8}{'replayed':>9}"]
    for key in sorted(fetched):
        lines.append(f"{key[0]:<7}{key[1]:<26}{fetched[key]:>8}{fetched[key] - bad[key]:>9}")
    total = sum(fetched.values())
    lines.append(f"{'all':<33}{total:>8}{total - len(failed):>9}")
    return "\n".join(lines)


def replay_all(address: str, coll: str, crawl: ReplayCrawl) -> dict[str, str]:
    """URL -> why it does not replay as fetched, for every URL the crawl fetched."""
    failed = {}
    for url, exchange in sorted(crawl.exchanges.items()):
        replayed = fetch(address, f"/{coll}/{crawl.timestamp}id_/{url}")
        reason = mismatch(exchange, replayed)
        if reason is not None:
            failed[url] = reason
    return failed


def assert_replays(pywb, crawl: ReplayCrawl, coll: str) -> None:
    address, loaded = pywb
    assert not loaded[coll], f"collection {coll!r} not loaded: {loaded[coll]}"
    failed = replay_all(address, coll, crawl)
    table = replay_table(crawl, failed)
    print(f"\npywb replay, collection {coll!r}:\n{table}")
    listed = "\n".join(f"  {url}: {why}" for url, why in sorted(failed.items())[:40])
    assert not failed, f"{len(failed)} URLs do not replay as fetched ({coll}):\n{table}\n{listed}"


# --- replay ------------------------------------------------------------------------------------


def test_every_fetched_url_replays_from_the_warc_files(pywb, replay_crawl):
    """``wb-manager add`` of the WARC files: pywb's own index."""
    assert_replays(pywb, replay_crawl, "pywb")


def test_every_fetched_url_replays_through_the_crawls_cdxj(pywb, replay_crawl):
    warcs = replay_crawl.files("*.warc.gz")
    missing = [p.name for p in warcs if not index_of(p).exists()]
    assert not missing, f"no CDXJ index beside {', '.join(missing)}"
    assert_replays(pywb, replay_crawl, "cdxj")


def needs_wacz() -> None:
    if not hasattr(defaults, "WARC_WACZ"):
        pytest.skip("this build has no WARC_WACZ")


def test_every_fetched_url_replays_from_the_wacz(pywb, replay_crawl):
    needs_wacz()
    assert_replays(pywb, replay_crawl, "wacz")


def test_the_wacz_passes_wacz_validate(tools_venv, replay_crawl):
    needs_wacz()
    waczs = replay_crawl.files("*.wacz")
    assert len(waczs) == 1, f"{len(waczs)} .wacz files in {replay_crawl.warc_dir}"
    done = subprocess.run([tool("wacz"), "validate", "-f", str(waczs[0])], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    if done.returncode != 0 or "invalid" in done.stdout.lower():
        notes = subprocess.run([tool("python"), "-c", FRICTIONLESS_NOTES, str(waczs[0])],
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        pytest.fail(f"wacz validate: {done.stdout.strip()[-1000:]}\n"
                    f"frictionless says:\n{notes.stdout[-2000:]}{notes.stderr[-1000:]}")


#: The frictionless errors behind ``wacz validate``'s "invalid package with errors {}".
FRICTIONLESS_NOTES = """
import os, sys, tempfile, zipfile
from frictionless import validate
with tempfile.TemporaryDirectory() as folder:
    zipfile.ZipFile(sys.argv[1]).extractall(folder)
    report = validate(os.path.join(folder, "datapackage.json"))
print("\\n".join(note for _, note in report.flatten(["type", "note"])))
"""


# --- two independent readers -------------------------------------------------------------------

#: Run by the tools venv's Python on the WARC files; prints JSON: the records per type and what
#: fails FastWARC's digest checks. ``fastwarc check -p`` itself fails every revisit (it hashes
#: the empty payload, not the original's) and every non-HTTP record (it checks payload digests of
#: HTTP records only, and consumes the block first): those are checked here as the spec says.
FASTWARC_CHECK = """
import json, sys
from collections import Counter
from fastwarc.warc import ArchiveIterator
seen, failed, revisits, payloads = Counter(), [], [], set()
for name in sys.argv[1:]:
    with open(name, "rb") as handle:
        for record in ArchiveIterator(handle, parse_http=False):
            kind, head = record.headers.get("WARC-Type"), record.headers
            seen[kind] += 1
            where = f"{name} {kind} {head.get('WARC-Target-URI')}"
            if "WARC-Block-Digest" in head and not record.verify_block_digest(False):
                failed.append(where + ": block digest")
            payload = head.get("WARC-Payload-Digest")
            if kind == "revisit":
                revisits.append((where, payload))
            elif record.is_http:
                record.parse_http()
                if payload and not record.verify_payload_digest(False):
                    failed.append(where + ": payload digest")
                if kind == "response":
                    payloads.add(payload)
            elif payload and payload != head.get("WARC-Block-Digest"):
                failed.append(where + ": payload digest is not the block digest")
failed += [w + ": names no response payload" for w, p in revisits if p not in payloads]
print(json.dumps({"records": seen, "failed": failed}))
"""


def warcio_records(path: Path) -> Counter[str]:
    """Records per type, as warcio reads them."""
    from warcio.archiveiterator import ArchiveIterator

    with path.open("rb") as handle:
        return Counter(record.rec_type for record in ArchiveIterator(handle))


def test_warcio_reads_every_record_with_its_digests(replay_crawl):
    for path in replay_crawl.files("*.warc.gz"):
        done = run_tool([str(WARCIO), "check", "-v", str(path)], path.parent)
        assert "digest pass" in done.stdout and "fail" not in done.stdout, done.stdout[-2000:]


def test_fastwarc_reads_the_same_records_and_digests(tools_venv, replay_crawl):
    warcs = replay_crawl.files("*.warc.gz")
    done = run_tool([tool("python"), "-c", FASTWARC_CHECK, *map(str, warcs)],
                    replay_crawl.warc_dir)  # fmt: skip
    report = json.loads(done.stdout)
    assert report["failed"] == [], "\n".join(report["failed"][:30])
    expected = sum((warcio_records(path) for path in warcs), Counter())
    assert report["records"] == dict(expected)
