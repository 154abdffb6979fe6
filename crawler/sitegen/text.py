"""Real-looking English text from the word lists and sentence templates in ``words.txt``.

:class:`TextMaker` fills templates such as ``{Name} {verbed} the {adj} {tnoun} near {place}``
with words drawn from a seeded :class:`random.Random`, so the same seed writes the same text.
``tnoun`` words come from one topic (gardening, cycling, ...): articles on different topics share
little vocabulary, which keeps distinct pages far apart in SimHash terms.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_WORDS_FILE = Path(__file__).with_name("words.txt")
_SLOT = re.compile(r"\{(\w+)\}")
MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip
_TITLES = (
    "How {Name} {verbed} the {adj} {tnoun}",
    "The {adj} {tnouns} of {place}",
    "A beginner's guide to the {adj} {tnoun}",
    "Why the {tnoun} still matters in {year}",
    "{num} lessons from a {adj} {tnoun}",
    "What we learned about the {tnoun2} this {month}",
    "Notes on the {adj} {tnoun} and the {tnoun2}",
    "In praise of the {adj} {tnoun}",
)


@dataclass(frozen=True)
class Words:
    """The sections of ``words.txt``: one tuple of entries per ``[section]``."""

    sections: dict[str, tuple[str, ...]]

    def __getitem__(self, name: str) -> tuple[str, ...]:
        return self.sections[name]

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(s[6:] for s in self.sections if s.startswith("topic "))


@lru_cache(maxsize=1)
def load_words() -> Words:
    """Parse ``words.txt`` once per process."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in _WORDS_FILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
        elif current is not None:
            current.append(line)
    return Words({k: tuple(v) for k, v in sections.items()})


def plural(noun: str) -> str:
    head, _, last = noun.rpartition(" ")
    if last.endswith(("s", "sh", "ch", "x")):
        last += "es"
    elif last.endswith("y") and last[-2:-1] not in ("a", "e", "i", "o", "u"):
        last = last[:-1] + "ies"
    else:
        last += "s"
    return f"{head} {last}" if head else last


class TextMaker:
    """Sentences, paragraphs and titles on a topic, from a seeded random generator."""

    def __init__(self, rng: random.Random, words: Words | None = None) -> None:
        self.rng = rng
        self.words = words or load_words()
        self._verbs = [tuple(v.split(" ", 1)) for v in self.words["verbs"]]
        self._focus: dict[str, tuple[str, ...]] = {}

    def set_focus(self, topic: str | None, people: int = 2, things: int = 3) -> None:
        """Make the next texts return to a few people, one place and a few topic nouns.

        Half of the name, place and topic-noun slots then use these, as a real article keeps
        returning to its subject; it also keeps distinct long texts far apart in SimHash terms.
        ``None`` clears the focus.
        """
        if topic is None:
            self._focus = {}
            return
        w, rng = self.words, self.rng
        self._focus = {
            "names": tuple(rng.sample(w["names"], people)),
            "places": (rng.choice(w["places"]),),
            "topic " + topic: tuple(rng.sample(w["topic " + topic], things)),
        }

    def _pick(self, section: str) -> str:
        focus = self._focus.get(section)
        if focus and self.rng.random() < 0.5:
            return self.rng.choice(focus)
        return self.rng.choice(self.words[section])

    def fill(self, template: str, topic: str) -> str:
        text = _SLOT.sub(lambda m: self._slot(m.group(1), topic), template)
        return text[:1].upper() + text[1:]

    def _slot(self, name: str, topic: str) -> str:
        rng, w = self.rng, self.words
        base = name.rstrip("2")
        if base == "Name":
            return self._pick("names")
        if base in ("tnoun", "tnouns"):
            noun = self._pick("topic " + topic)
            return plural(noun) if base == "tnouns" else noun
        if base in ("noun", "nouns"):
            noun = rng.choice(w["nouns"])
            return plural(noun) if base == "nouns" else noun
        if base in ("verb", "verbed"):
            verb = rng.choice(self._verbs)
            return verb[0] if base == "verb" else verb[1]
        if base == "place":
            return self._pick("places")
        simple = {"adj": "adjectives", "adv": "adverbs"}
        if base in simple:
            return rng.choice(w[simple[base]])
        if base == "num":
            return str(rng.randint(2, 40))
        if base == "month":
            return rng.choice(MONTHS)
        if base == "year":
            return str(rng.randint(1950, 2024))
        if base == "Topic":
            return topic
        raise ValueError(f"words.txt: unknown template slot {{{name}}}")

    def sentence(self, topic: str) -> str:
        return self.fill(self.rng.choice(self.words["templates"]), topic)

    def paragraph(self, topic: str, sentences: int) -> str:
        return " ".join(self.sentence(topic) for _ in range(sentences))

    def paragraphs(self, topic: str, count: int, lo: int = 3, hi: int = 5) -> list[str]:
        return [self.paragraph(topic, self.rng.randint(lo, hi)) for _ in range(count)]

    def words_text(self, topic: str, lo: int, hi: int) -> str:
        """Whole sentences adding up to between ``lo`` and ``hi`` words (``hi`` wins)."""
        goal = self.rng.randint(lo, hi)
        out: list[str] = []
        count = 0
        for _ in range(200):
            sentence = self.sentence(topic)
            size = len(sentence.split())
            if count + size > hi:
                if count >= lo:
                    break
                continue
            out.append(sentence)
            count += size
            if count >= goal:
                break
        return " ".join(out)

    def title(self, topic: str) -> str:
        return self.fill(self.rng.choice(_TITLES), topic)

    def date(self, lo_year: int = 2023, hi_year: int = 2025) -> tuple[int, int, int]:
        return self.rng.randint(lo_year, hi_year), self.rng.randint(1, 12), self.rng.randint(1, 28)


def format_date(ymd: tuple[int, int, int]) -> str:
    year, month, day = ymd
    return f"{day} {MONTHS[month - 1]} {year}"
