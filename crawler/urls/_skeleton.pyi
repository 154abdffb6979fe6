"""The depth proof in C (``_skeleton.c``; :mod:`crawler.urls.pagebounds` is its spec)."""

def tokens(markup: str, /) -> list[str]:
    """``_SKELETON.findall(markup)``: the page's tags as skeleton tokens."""

def foreign(markup: str, /) -> bool:
    """``_FOREIGN.search(markup) is not None``: "<svg" or "<math" anywhere, any case."""

def proof(
    markup: str, max_depth: int, max_formatting: int, /
) -> tuple[bool, frozenset[str] | None]:
    """``_proof_by_expressions(markup, max_depth, max_formatting)``: the whole depth proof."""
