"""What the faces (the command line, the demo) print on a terminal: library log lines and warnings,
in the face's words, above a live progress bar where one is drawn. Below both faces, so
that the demo sets up its logging without reaching into the CLI; the CLI gives its wording (flags
for parameters, :func:`streamrank.cli.common.translate`)."""

import logging
import sys

# how the face that set up logging words library messages (None: the library's own words)
_WORDING = [None]


class _WordingFormatter(logging.Formatter):
    """Formats library log messages in the face's words (the record itself, which other handlers may
    also see, is left as the library wrote it)."""

    def format(self, record):
        text = super().format(record)
        return text if _WORDING[0] is None else _WORDING[0](text)


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Library warnings as one log line in the face's words (no source location, no class name)."""
    logging.getLogger("streamrank").warning("warning: %s", message)


class _BarAwareHandler(logging.StreamHandler):
    """Log lines written above a live progress bar (tqdm.write) where bars are drawn; plain lines
    elsewhere (a log file gets the lines, no bar frames between them)."""

    def emit(self, record):
        try:
            from streamrank.execution.progress import drawing, shown
            if drawing():
                from tqdm import tqdm
                tqdm.write(self.format(record), file=self.stream)
            else:
                self.stream.write(self.format(record) + "\n")
                self.flush()
            shown()
        except Exception:  # noqa: BLE001 - logging must not raise
            self.handleError(record)


def setup_logging(quiet, progress=True, wording=None):
    """Library log lines (and warnings) on stderr in the face's words: INFO and up for commands that
    report progress (``progress``), warnings only otherwise or with --quiet. ``wording``: how the face
    words library messages (the CLI's: its flags for parameters), kept for later calls that give none
    (the demo run from the command line); messages keep the library's words until a face sets one."""
    if wording is not None:
        _WORDING[0] = wording
    import warnings
    warnings.showwarning = _show_warning
    logger = logging.getLogger("streamrank")
    logger.handlers[:] = []
    h = _BarAwareHandler(sys.stderr)
    h.setFormatter(_WordingFormatter("%(message)s"))
    logger.addHandler(h)
    logger.setLevel(logging.WARNING if quiet or not progress else logging.INFO)
