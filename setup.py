"""Build shim: the metadata is in pyproject.toml; this file only exists for two reasons.

* ``scrapyd-deploy`` builds the egg with ``python setup.py bdist_egg`` and, without a
  ``setup.py``, writes its own (``find_packages()``: every top-level package of the checkout,
  ``settings`` and ``tests`` included) into the checkout. With this one the egg holds the
  ``crawler`` package only, with the ``scrapy`` entry point ``settings = crawler.settings``.
* ``crawler/siteserver.py`` serves the generated test sites of ``crawler/sitegen`` (left out of
  the wheel by pyproject.toml) and cannot run without them, so the built packages leave it out
  too. An editable install (``pip install -e .``) maps the checkout and keeps both.

``scrapyd-deploy`` runs this file with the setuptools of its own venv: a fresh Python 3.11
venv has setuptools 65, which refuses the SPDX ``license`` string of pyproject.toml (read
since setuptools 77) before building anything. :func:`license_for_old_setuptools` lets
setuptools 61 to 76 read it in the form they know, so ``pip install scrapyd-client`` in a
fresh venv is all a deploy needs.
"""

from __future__ import annotations

from typing import Any

import setuptools
from setuptools import setup
from setuptools.command.build_py import build_py

CHECKOUT_ONLY_MODULES = {("crawler", "siteserver")}


class BuildPy(build_py):
    """``build_py`` without the checkout-only modules."""

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if (m[0], m[1]) not in CHECKOUT_ONLY_MODULES]


def license_for_old_setuptools() -> None:
    """Under setuptools 61 to 76, read ``project.license = "BSD-3-Clause"`` (PEP 639) as
    ``{text = "BSD-3-Clause"}``, the form they validate: the egg's ``License`` field says the
    same. The patched ``setuptools.config.pyprojecttoml.load_file`` is the reader of
    pyproject.toml in every one of those (frozen) releases; setuptools 77 and later, which
    read the SPDX string themselves, are left alone."""
    if int(setuptools.__version__.split(".")[0]) >= 77:
        return
    from setuptools.config import pyprojecttoml

    load_file = pyprojecttoml.load_file

    def load_with_license_text(filepath: Any) -> dict:
        config = load_file(filepath)
        project = config.get("project", {})
        if isinstance(project.get("license"), str):
            project["license"] = {"text": project["license"]}
        return config

    pyprojecttoml.load_file = load_with_license_text


license_for_old_setuptools()
setup(cmdclass={"build_py": BuildPy})
