"""What a crawl writes besides its database: the drop log (``droplog``), how values are written
for people and files (``formats``), WARC archives (``warc``) and feeds of stored pages
(``feeds``).
"""

__floor__ = "library"
