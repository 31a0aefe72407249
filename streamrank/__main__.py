"""python -m streamrank: the command line."""

import sys

from streamrank.cli import main

sys.exit(main())
