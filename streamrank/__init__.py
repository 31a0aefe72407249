"""streamrank: pairwise ranking SVMs on learning-to-rank data larger than memory."""

from . import _memory
from ._version import __version__
from .dataset import Dataset, open_dataset
from .ranksvm import RankSVM, load

_memory.configure()

__all__ = ["__version__", "Dataset", "open_dataset", "RankSVM", "load"]
