"""Build shim: the metadata is in pyproject.toml; this file exists for two reasons.

* ``scrapyd-deploy`` builds the egg with ``python setup.py bdist_egg`` and, without a
  ``setup.py``, writes its own (``find_packages()``: every top-level package of the checkout,
  ``settings`` and ``tests`` included) into the checkout. With this one the egg holds the
  ``crawler`` package only, with the ``scrapy`` entry point ``settings = crawler.settings``.
* ``crawler/sitegen/`` (the generated test sites and their server, ``crawler/sitegen/server.py``)
  is left out of the built packages by pyproject.toml; an editable install (``pip install -e .``)
  maps the checkout and keeps it.
* The C extensions (:data:`C_MODULES`, :func:`extensions`) are declared here: optional, left
  out of the egg.

``scrapyd-deploy`` runs this file with the setuptools of its own venv: a fresh Python 3.11
venv has setuptools 65, which refuses the SPDX ``license`` string of pyproject.toml (read
since setuptools 77) before building anything. :func:`license_for_old_setuptools` lets
setuptools 61 to 76 read it in the form they know, so ``pip install scrapyd-client`` in a
fresh venv is all a deploy needs.
"""

from __future__ import annotations

import sys
from typing import Any

import setuptools
from setuptools import Extension, setup


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


def extensions() -> list[Extension]:
    """The depth proof in C (``crawler/urls/_skeleton.c``: a seventh of the regular
    expressions' cost), a Bloom layer's probes (``crawler/backends/_bloomprobe.c``) and
    SimHash's vote (``crawler/content/_majority.c``) in C, optional: where they cannot be
    built the pure-Python paths run, answering the same. Not in the scrapyd egg
    (``bdist_egg``): a zipped egg cannot load a shared library without unpacking it, and the
    egg stays one file for any platform."""
    if "bdist_egg" in sys.argv:
        return []
    return [Extension(name, [name.replace(".", "/") + ".c"], optional=True)
            for name in C_MODULES]


#: The C modules, each the faster twin of Python code that stays as its specification.
C_MODULES = ("crawler.urls._skeleton", "crawler.backends._bloomprobe",
             "crawler.content._majority")


license_for_old_setuptools()
setup(ext_modules=extensions())
