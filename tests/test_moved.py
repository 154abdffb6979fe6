"""crawler/moved.py: the module paths of 0.1 still import, as the modules at their new paths."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from scrapy.utils.misc import load_object

from crawler.moved import MOVED, new_name


def test_every_old_path_names_a_module_that_exists() -> None:
    assert len(MOVED) > 40
    for old, new in MOVED.items():
        assert new_name(old) == new
        assert __import__(new, fromlist=["_"]).__name__ == new


@pytest.mark.parametrize(("old", "new"), [
    ("crawler.progress.DedupProgress", "crawler.extensions.progress.DedupProgress"),
    ("crawler.backends.scheduler.SharedScheduler", "crawler.cluster.scheduler.SharedScheduler"),
    ("crawler.fingerprint.CanonicalRequestFingerprinter",
     "crawler.urls.fingerprint.CanonicalRequestFingerprinter"),
    ("crawler.warc.capture.RawCaptureMiddleware",
     "crawler.outputs.warc.capture.RawCaptureMiddleware"),
])  # fmt: skip
def test_an_old_setting_loads_the_same_class(old: str, new: str) -> None:
    assert load_object(old) is load_object(new)


def test_an_old_path_is_the_same_module_object_and_warns_once() -> None:
    """In a fresh interpreter: one WARNING per old path naming the new one; a module under a
    moved package is not run a second time (its classes are the same objects)."""
    code = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(message)s')\n"
        "import crawler.warc.capture as old\n"
        "import crawler.warc.capture\n"
        "import crawler.outputs.warc.capture as new\n"
        "assert old is new, (old, new)\n"
        "assert sys.modules['crawler.warc.capture'] is new\n"
        "import crawler.nothere\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    warnings = [line for line in result.stderr.splitlines() if line.startswith("WARNING")]
    assert warnings == ["WARNING crawler.warc moved to crawler.outputs.warc: change the setting "
                        "or import that names it (the old path goes in 0.3; "
                        "docs/architecture.md)",
                        "WARNING crawler.warc.capture moved to crawler.outputs.warc.capture: "
                        "change the setting or import that names it (the old path goes in 0.3; "
                        "docs/architecture.md)"]  # fmt: skip
    assert "ModuleNotFoundError: No module named 'crawler.nothere'" in result.stderr


def test_a_name_never_moved_is_not_answered(caplog) -> None:
    assert new_name("crawler.urls.urlnorm") is None and new_name("crawler.textual") is None
    with caplog.at_level(logging.WARNING), pytest.raises(ModuleNotFoundError):
        __import__("crawler.pipelines.nothing")
    assert not caplog.records
