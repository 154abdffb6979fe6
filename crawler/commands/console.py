"""What the project's commands share about their output: the terminal's width, a reader that
left early (``scrapy dropped | head``: a broken pipe is not an error), output that is safe
for a terminal (:func:`safe_output`: crawled text never reaches it raw), and the crawl's log
file as a second home for a failing command's last words (:func:`echo_to_log_file`)."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, ParamSpec, TextIO, TypeVar

from crawler.outputs.formats import terminal_safe

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

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
    """A text stream that writes everything through :func:`crawler.outputs.formats.terminal_safe`;
    any
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


def echo_to_log_file(settings: BaseSettings, logger: str, *lines: str) -> None:
    """Append ``lines`` to the file of ``LOG_FILE`` as ERROR records of ``logger``, in Scrapy's
    format (``LOG_FORMAT``, ``LOG_DATEFORMAT``, ``LOG_ENCODING``); nothing when it is unset.

    A command prints why it fails on stderr; where the crawl logs to a file that line must be
    in the file too. scrapyd passes ``LOG_FILE`` to every job, shows that file (``log_url``)
    and keeps no exit status. Once Scrapy has set up logging, the records go through its
    handler of that file, whatever ``LOG_LEVEL``; before (the input checks), the file is
    opened as Scrapy opens it (truncated when ``LOG_FILE_APPEND`` is false), so ``log_url``
    exists. A file that cannot be written costs one more line on stderr, never a traceback.
    """
    path = settings.get("LOG_FILE")
    if not path:
        return
    handler = _scrapy_log_handler(str(path))
    own = handler is None
    if handler is None:
        handler = _new_log_handler(settings, str(path))
    if handler is None:
        return
    for line in lines:
        handler.handle(logging.LogRecord(logger, logging.ERROR, __file__, 0, line, None, None))
    if own:
        handler.close()


def _scrapy_log_handler(path: str) -> logging.Handler | None:
    """The root logger's handler writing ``path`` (Scrapy's, once it set up logging)."""
    wanted = os.path.abspath(path)
    return next((h for h in logging.root.handlers if isinstance(h, logging.FileHandler)
                 and h.baseFilename == wanted), None)  # fmt: skip


def _new_log_handler(settings: BaseSettings, path: str) -> logging.Handler | None:
    """A handler of ``path`` as Scrapy makes it; ``None``, said on stderr, if it cannot open."""
    mode = "a" if settings.getbool("LOG_FILE_APPEND", True) else "w"
    try:
        handler = logging.FileHandler(path, mode=mode, encoding=settings.get("LOG_ENCODING"))
    except OSError as exc:
        print(terminal_safe(f"note: cannot write the error to LOG_FILE {path}: {exc.strerror}"),
              file=sys.stderr)  # fmt: skip
        return None
    handler.setFormatter(logging.Formatter(settings.get("LOG_FORMAT"),
                                           settings.get("LOG_DATEFORMAT")))  # fmt: skip
    return handler
