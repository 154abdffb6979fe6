"""The depth proof's first pass in C (``_skeleton.c``; :mod:`crawler.urls.pagebounds`)."""

def tokens(markup: str, /) -> list[str]:
    """``_SKELETON.findall(markup)``: the page's tags as skeleton tokens."""

def foreign(markup: str, /) -> bool:
    """``_FOREIGN.search(markup) is not None``: "<svg" or "<math" anywhere, any case."""
