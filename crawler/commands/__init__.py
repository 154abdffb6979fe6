"""The ``scrapy`` commands of the project (``COMMANDS_MODULE``), what they check before a crawl
starts (``preflight``) and what they share about their output (``console``). The top floor:
nothing below imports it.
"""

__floor__ = "command"
