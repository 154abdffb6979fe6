"""What the project's commands share about their output: the terminal's width, a reader that
left early (``scrapy dropped | head``: a broken pipe is not an error), and output that is safe
for a terminal (:func:`safe_output`: crawled text never reaches it raw)."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from typing import ParamSpec, TextIO, TypeVar

from crawler.formats import terminal_safe

P = ParamSpec("P")
R = TypeVar("R")

#: Said once on stderr by a command whose output had control characters escaped.
ESCAPED_NOTE = ("note: control characters in the output are shown escaped (\\x1b, \\u009b), "
                "never sent to the terminal")
WIDTH = 80  # a terminal whose width cannot be read
MIN_WIDTH = 40


def quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def terminal_width() -> int:
    """Columns of the terminal (``COLUMNS`` first, as :func:`shutil.get_terminal_size`)."""
    return max(MIN_WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns)


class SafeStream:
    """A text stream that writes everything through :func:`crawler.formats.terminal_safe`; any
    other attribute (``isatty``, ``fileno``, ``flush``, ``encoding``) is the wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.escaped = False  # a control character was escaped

    def write(self, text: str) -> int:
        safe = terminal_safe(text)
        self.escaped = self.escaped or safe != text
        return self.stream.write(safe)

    def writelines(self, lines: list[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> object:
        return getattr(self.stream, name)


@contextlib.contextmanager
def safe_output() -> Iterator[None]:
    """Escape control characters in all a command prints to stdout and stderr while it runs
    (the one output boundary), and in the message of an error it raises (a usage error, which
    Scrapy prints after the command returns). A command's ``run`` runs inside this; when it
    escaped anything, one note on stderr says so (the page did not hold a literal ``\\x1b``)."""
    saved = sys.stdout, sys.stderr
    streams = SafeStream(saved[0]), SafeStream(saved[1])
    sys.stdout, sys.stderr = streams  # type: ignore[assignment]
    try:
        yield
    except Exception as exc:
        exc.args = tuple(map(_safe_arg, exc.args))
        raise
    finally:
        sys.stdout, sys.stderr = saved
        if any(stream.escaped for stream in streams):
            print(ESCAPED_NOTE, file=saved[1])


def _safe_arg(arg: object) -> object:
    return terminal_safe(arg) if isinstance(arg, str) else arg


def with_safe_output(run: Callable[P, R]) -> Callable[P, R]:
    """Decorate a command's ``run``: all it prints goes through :func:`safe_output`."""
    @functools.wraps(run)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with safe_output():
            return run(*args, **kwargs)

    return wrapper
