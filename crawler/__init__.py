"""dedup-crawler: a Scrapy crawler that removes duplicate URLs and duplicate content."""

__version__ = "0.1.0"
