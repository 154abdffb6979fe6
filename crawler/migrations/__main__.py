"""``python -m crawler.migrations revision -m "why" [--autogenerate] [--url URL]``."""

import sys

from crawler.migrations import main

sys.exit(main(sys.argv[1:]))
