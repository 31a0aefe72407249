"""python -m streamrank: the command line."""

from streamrank.cli.main import run

run()
