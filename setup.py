"""Build shim: the metadata is in pyproject.toml; this file only exists for two reasons.

* ``scrapyd-deploy`` builds the egg with ``python setup.py bdist_egg`` and, without a
  ``setup.py``, writes its own (``find_packages()``: every top-level package of the checkout,
  ``settings`` and ``tests`` included) into the checkout. With this one the egg holds the
  ``crawler`` package only, with the ``scrapy`` entry point ``settings = crawler.settings``.
* ``crawler/siteserver.py`` serves the generated test sites of ``crawler/sitegen`` (left out of
  the wheel by pyproject.toml) and cannot run without them, so the built packages leave it out
  too. An editable install (``pip install -e .``) maps the checkout and keeps both.
"""

from __future__ import annotations

from setuptools import setup
from setuptools.command.build_py import build_py

CHECKOUT_ONLY_MODULES = {("crawler", "siteserver")}


class BuildPy(build_py):
    """``build_py`` without the checkout-only modules."""

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if (m[0], m[1]) not in CHECKOUT_ONLY_MODULES]


setup(cmdclass={"build_py": BuildPy})
