#!/usr/bin/env python3
"""quantmark from a clone: ``python run.py [...]`` is the ``quantmark`` command (quantmark.cli).

Install first (``pip install -e .``): quantmark's parts are imported as ``quantmark.<part>``.
"""

import sys

from quantmark.cli import main

if __name__ == "__main__":
    sys.exit(main())
