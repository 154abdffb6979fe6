"""What the review commands share about their standard output: the terminal's width, and a
reader that left early (``scrapy dropped | head``: a broken pipe is not an error)."""

from __future__ import annotations

import os
import shutil
import sys

WIDTH = 80  # a terminal whose width cannot be read
MIN_WIDTH = 40


def quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def terminal_width() -> int:
    """Columns of the terminal (``COLUMNS`` first, as :func:`shutil.get_terminal_size`)."""
    return max(MIN_WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns)
