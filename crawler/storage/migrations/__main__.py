"""``python -m crawler.storage.migrations revision -m "why" [--autogenerate] [--url URL]``.
"""

import sys

from crawler.storage.migrations import main

sys.exit(main(sys.argv[1:]))
