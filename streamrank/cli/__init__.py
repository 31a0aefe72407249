"""The ``streamrank`` command line: one module per group of commands, the shared glue in
:mod:`streamrank.cli.common`, the parser and error handling in :mod:`streamrank.cli.main`."""

from streamrank.cli.common import _setup_logging, translate
from streamrank.cli.main import build_parser, main

__all__ = ["build_parser", "main", "translate", "_setup_logging"]
