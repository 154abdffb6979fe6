"""crawler.urls.traps, the library: learned parameters, budgets, which pages' links are followed."""

from __future__ import annotations

import pytest

from crawler.config import SettingError
from crawler.urls.linkrules import LinkRules
from crawler.urls.traps import CrawlBudget, ParamLearner, TrapRules, TrapSettings, split_query
from crawler.vocab import EXACT_DUPLICATE, NEAR_DUPLICATE, SOFT_404, Drop

H = "http://h.test"


def test_a_parameter_is_learned_after_enough_duplicates_differing_only_in_it() -> None:
    learner = ParamLearner(after=3)
    learner.kept(f"{H}/a?sid=1")
    assert learner.duplicate(f"{H}/a?sid=2", f"{H}/a?sid=1") == []
    assert learner.duplicate(f"{H}/b?sid=3&x=1", f"{H}/b?sid=4&x=1") == []
    assert learner.duplicate(f"{H}/a?sid=5", f"{H}/a?sid=1") == ["sid"]
    assert learner.learned == {"h.test": {"sid"}}
    assert learner.duplicate(f"{H}/a?sid=6", f"{H}/a?sid=1") == []  # learned once


def test_a_parameter_seen_to_matter_is_never_learned() -> None:
    learner = ParamLearner(after=2)
    learner.kept(f"{H}/list?page=1&sort=a")
    learner.kept(f"{H}/list?page=2&sort=a")  # two kept pages that differ only in page
    for n in range(5):
        assert learner.duplicate(f"{H}/list?page={60 + n}", f"{H}/list?page=59") == []
    assert learner.learned == {}


def test_evidence_needs_the_same_path_and_few_differences() -> None:
    learner = ParamLearner(after=1)
    assert learner.duplicate(f"{H}/a?s=1", f"{H}/b?s=2") == []  # another path: a mirror
    assert learner.duplicate(f"{H}/a?x=1&y=1&z=1", f"{H}/a?x=2&y=2&z=2") == []  # ambiguous
    assert learner.duplicate(f"{H}/a?x=1&x=2", f"{H}/a?x=3") == []  # a repeated name
    assert learner.duplicate(f"{H}/a", f"{H}/a?ref=home") == ["ref"]  # present in one only
    assert ParamLearner(after=0).duplicate(f"{H}/a?s=1", f"{H}/a?s=2") == []  # off


def test_split_query() -> None:
    assert split_query(f"{H}/p?a=1&b=") == (f"{H}/p", {"a": "1", "b": ""})
    assert split_query(f"{H}/p") == (f"{H}/p", {})
    assert split_query(f"{H}/p?a=1&a=2")[1] is None


def test_budgets_refuse_once_spent_and_count_drops_back() -> None:
    budget = CrawlBudget(host_max_pages=0, path_max_query_variants=2)
    for n in range(2):
        assert budget.refuse(f"{H}/cal?d={n}") is None
        budget.count(f"{H}/cal?d={n}")
    assert budget.refuse(f"{H}/cal?d=9") == "urlnorm/trap/query_variants"
    assert budget.refuse(f"{H}/other?d=9") is None and budget.refuse(f"{H}/cal") is None
    budget.count(f"{H}/cal?d=1", -1)  # the scheduler refused it after all
    assert budget.refuse(f"{H}/cal?d=9") is None
    pages = CrawlBudget(host_max_pages=1, path_max_query_variants=0)
    pages.count(f"{H}/x")
    assert pages.refuse(f"{H}/y") == "urlnorm/trap/host_pages"
    assert pages.refuse("http://other.test/y") is None


def test_budget_tables_are_bounded() -> None:
    budget = CrawlBudget(0, 5, size=3)
    for n in range(10):
        budget.count(f"{H}/p{n}?q=1")
    assert len(budget._paths) <= 3


@pytest.mark.parametrize(("follow", "reason", "followed"), [
    ("kept", None, True), ("kept", EXACT_DUPLICATE, False), ("kept", NEAR_DUPLICATE, False),
    ("kept", SOFT_404, False), ("near_duplicates", NEAR_DUPLICATE, True),
    ("near_duplicates", EXACT_DUPLICATE, False), ("all", EXACT_DUPLICATE, True),
    ("all", SOFT_404, True),
])  # fmt: skip
def test_whose_links_are_followed_without_hops(follow: str, reason: str | None,
                                               followed: bool) -> None:
    counted: list[str] = []
    rules = TrapRules(TrapSettings(follow_links_of=follow, duplicate_hops=0), counted.append)
    drop = None if reason is None else Drop(f"{H}/b", reason, f"{H}/a", 0)
    assert (rules.follows(drop, f"{H}/b") == 0) is followed
    assert counted == ([] if followed else [f"dedup/links_not_followed/{reason}"])


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_a_duplicates_links_are_followed_up_to_the_hop_limit(limit: int) -> None:
    """A chain of duplicates, each linked from the one before: links followed from the first
    ``limit`` of them; a kept page starts the count again; a soft 404 never counts."""
    counted: list[str] = []
    rules = TrapRules(TrapSettings(duplicate_hops=limit), counted.append)
    near = Drop(f"{H}/b", NEAR_DUPLICATE, f"{H}/a", 2)
    exact = Drop(f"{H}/c", EXACT_DUPLICATE, f"{H}/a", 0)
    hops: int | None = 0
    chain: list[int | None] = []
    for n in range(limit + 3):
        assert hops is not None
        hops = rules.follows(near if n % 2 else exact, f"{H}/p{n}", hops)
        chain.append(hops)
        if hops is None:
            break
    assert chain == [*range(1, limit + 1), None]
    assert rules.follows(None, f"{H}/kept", limit) == 0  # a kept page: links followed, count reset
    assert rules.follows(Drop(f"{H}/s", SOFT_404, f"{H}/x", 0), f"{H}/s", 0) is None
    assert counted.count("dedup/links_not_followed/soft_404") == 1
    assert sum(c.startswith("dedup/links_followed_from/") for c in counted) == limit


def test_origins_are_probed_once_and_not_at_all_when_off() -> None:
    rules = TrapRules()
    assert rules.unprobed([f"{H}/a", f"{H}/b", "https://h.test:8443/c"]) == [
        H, "https://h.test:8443"]
    assert rules.unprobed([f"{H}/z"]) == []
    assert TrapRules(TrapSettings(soft404_probe=False)).unprobed([f"{H}/a"]) == []


def test_a_learned_parameter_is_folded_out_of_its_hosts_links_only() -> None:
    rules = LinkRules()
    rules.ignore("h.test", "sid")
    assert rules.normalize("/p?sid=9&a=1", f"{H}/") == f"{H}/p?a=1"
    assert rules.normalize("http://o.test/p?sid=9") == "http://o.test/p?sid=9"
    rules.ignore("h.test", "we*rd%5B")  # a name as canonical URLs spell it, not a pattern
    assert rules.normalize("/p?weird=1&we*rd[=2", f"{H}/") == f"{H}/p?weird=1"


@pytest.mark.parametrize(("name", "value"), [
    ("TRAP_FOLLOW_LINKS_OF", "sometimes"), ("TRAP_LEARN_PARAMS_AFTER", -1),
    ("TRAP_HOST_MAX_PAGES", "many"), ("TRAP_SOFT404_PROBE", "perhaps"),
    ("TRAP_DUPLICATE_HOPS", -1), ("TRAP_DUPLICATE_HOPS", 17), ("TRAP_DUPLICATE_HOPS", "two"),
    ("TRAP_MAX_SEGMENT_REPEAT", 0), ("TRAP_MAX_PATH_DEPTH", "deep"), ("TRAP_MAX_QUERY_PARAMS", 0),
    ("URLLENGTH_LIMIT", -1),
])  # fmt: skip
def test_bad_settings_are_refused(name: str, value: object) -> None:
    with pytest.raises(SettingError) as info:
        TrapSettings.from_settings({name: value})
    assert info.value.name == name


class _Reads(dict):
    """A settings mapping that counts each name read."""

    def __init__(self, values: dict[str, object]) -> None:
        super().__init__(values)
        self.reads: dict[str, int] = {}

    def get(self, name: str, default: object = None) -> object:
        self.reads[name] = self.reads.get(name, 0) + 1
        return super().get(name, default)


def test_every_trap_setting_has_one_home_and_is_read_there_once() -> None:
    from crawler import defaults

    names = {n for n in dir(defaults) if n.startswith("TRAP_") and not n.endswith("_CHOICES")}
    settings = _Reads({})
    TrapSettings.from_settings(settings)
    assert settings.reads == dict.fromkeys(names | {"URLLENGTH_LIMIT"}, 1)


def test_the_link_rules_take_their_limits_from_the_trap_settings() -> None:
    values = {"TRAP_MAX_SEGMENT_REPEAT": 2, "TRAP_MAX_PATH_DEPTH": 5, "TRAP_MAX_QUERY_PARAMS": 4,
              "URLLENGTH_LIMIT": 0, "TRAP_HOST_MAX_PAGES": 7}  # fmt: skip
    settings = _Reads(values)
    rules = LinkRules.from_settings(settings)
    assert settings.reads["TRAP_MAX_PATH_DEPTH"] == 1
    limits = rules.limits
    assert (limits.max_segment_repeat, limits.max_path_depth, limits.max_query_params,
            limits.max_length) == (2, 5, 4, 0)  # fmt: skip
    assert rules.judge_canonical(f"{H}/a/b/c/d/e/f") == "urlnorm/trap/path_depth"
    assert TrapRules(TrapSettings.from_settings(values)).budget.host_max_pages == 7
