"""The project's own contracts: settings in one place, a manual that tells the truth (the README
and the pages of ``docs/``)."""

from __future__ import annotations

import re

from crawler import defaults
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
SETTINGS_PAGE = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
STATS_PAGE = (ROOT / "docs" / "stats.md").read_text(encoding="utf-8")
BASE = (ROOT / "crawler" / "settings" / "base.py").read_text(encoding="utf-8")
NOT_SETTINGS = {"SEED_DEFAULT_SCHEME", "SIMHASH_MAX_DISTANCE_RANGE"}


def project_defaults() -> set[str]:
    return {
        name
        for name in vars(defaults)
        if name.isupper() and not name.endswith("_CHOICES") and name not in NOT_SETTINGS
    }


def base_settings() -> set[str]:
    return set(re.findall(r"^([A-Z][A-Z0-9_]+) = ", BASE, flags=re.M))


def test_every_default_is_a_setting_in_base_with_a_comment():
    missing = project_defaults() - base_settings()
    assert not missing, f"crawler/settings/base.py lacks {sorted(missing)}"
    lines = BASE.splitlines()
    for previous, line in zip(["", *lines], lines, strict=False):
        if re.match(r"^[A-Z][A-Z0-9_]+ = ", line) and not line.rstrip().endswith(("{", "[")):
            assert "  # " in line or previous.startswith("# "), f"no comment: {line}"


def test_every_project_setting_is_in_the_settings_table():
    documented = set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)`", SETTINGS_PAGE, flags=re.M))
    missing = project_defaults() - documented
    assert not missing, f"docs/settings.md lacks {sorted(missing)}"


def test_every_stat_the_code_writes_is_in_the_stats_page():
    keys: set[str] = set()
    for path in (ROOT / "crawler").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        keys |= set(re.findall(r"""["']((?:dedup|urlnorm|storage)/[a-z_/]+)["']""", text))
    missing = sorted(k for k in keys if k.rstrip("/") not in STATS_PAGE)
    assert not missing, f"docs/stats.md lacks {missing}"


def test_readme_starts_with_the_install_and_test_blocks():
    """``.ci/run`` runs the README's first two fenced blocks, whatever their language."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", README, flags=re.S | re.M)
    assert "python3 -m venv .venv" in blocks[0] and "scrapy demo" in blocks[0]
    assert "pytest" in blocks[1]
