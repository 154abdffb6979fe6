"""dedup-crawler: a Scrapy crawler that removes duplicate URLs and duplicate content.

The tree shows the design (docs/architecture.md walks a page through it). Each package's
``__init__`` says what it owns and declares its floor in ``__floor__``; a module that differs
from its package declares its own. ``tests/test_floors.py`` reads these declarations and checks
that nothing imports upward.

* **library** (imports neither Scrapy nor Twisted): the shared words at the top (``config``,
  ``defaults``, ``vocab``, ``items``, ``meta``, ``signals``, ``extras``), ``urls/`` (canonical
  keys, link rules, traps, seeds), ``content/`` (text, tokens, SimHash, block tables,
  templates, set fingerprints), ``state/`` (JOBDIR), ``backends/`` (seen sets and content
  indexes, local and Redis), ``outputs/`` (drop log, formats), ``storage/``, ``report/``,
  ``review/``, ``sitegen/``, and the decision rules in ``dedup/`` (``preference``,
  ``overrides``, ``settle``);
* **component** (Scrapy wiring): ``dupefilter``, ``logformatter``, ``exceptions``, ``closing``
  at the top, ``dedup/`` (the :class:`~crawler.dedup.decider.ContentDecider`), ``pipelines/``,
  ``middlewares/``, ``spiders/``, ``extensions/``, ``cluster/`` (the distributed profile),
  ``outputs/warc`` and ``outputs/feeds``, ``settings/``;
* **command**: ``commands/``.
"""

__floor__ = "library"

__version__ = "0.1.0"

from crawler.moved import install as _install_moved_paths

_install_moved_paths()  # the module paths of 0.1 still import (crawler/moved.py)
