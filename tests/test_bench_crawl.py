"""``bench.crawl``'s scale-out options: ``--variant`` (another checkout or environment of one
worker, side by side with the others) parsed, refused in one line when malformed, and placed
among the configurations the run alternates."""

from __future__ import annotations

import pytest

from bench.crawl import parse_args, parse_variant, scaleout_configs
from tests.conftest import ROOT


def test_a_variant_names_a_tree_and_environment() -> None:
    name, spec = parse_variant(f"before:tree={ROOT},env=PYTHONPATH=/tmp/x,env=A=b=c")
    assert name == "1 worker before"
    assert spec == {"tree": str(ROOT.resolve()), "env": {"PYTHONPATH": "/tmp/x", "A": "b=c"}}
    expected = ("1 worker hiredis", {"tree": None, "env": {"X": "1"}})
    assert parse_variant("hiredis:env=X=1") == expected


@pytest.mark.parametrize("text, says", [
    ("nolabel", "expected LABEL:"),
    (":env=X=1", "expected LABEL:"),
    ("old:tree=/nonexistent/tree", "no scrapy.cfg"),
    ("old:colour=blue", "expected tree=PATH or env=NAME=VALUE"),
    ("old:env=NOVALUE", "expected tree=PATH or env=NAME=VALUE"),
])  # fmt: skip
def test_a_malformed_variant_is_refused_in_one_line(capsys, text: str, says: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--workers", "2", "--variant", text])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error: --variant:" in err and says in err


def test_variants_run_between_one_worker_and_the_many() -> None:
    args = parse_args(["--workers", "2", "--variant", "a:env=X=1", "--variant", "b:env=Y=2"])
    assert scaleout_configs(args) == ["local", "1 worker", "1 worker a", "1 worker b",
                                      "2 workers"]  # fmt: skip
    one = parse_args(["--workers", "1", "--variant", "a:env=X=1"])
    assert scaleout_configs(one) == ["local", "1 worker", "1 worker a"]
