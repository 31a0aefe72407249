"""streamrank: pairwise ranking SVMs on learning-to-rank data larger than memory."""

from ._version import __version__
from .dataset import Dataset, open_dataset
from .ranksvm import RankSVM, load

__all__ = ["__version__", "Dataset", "open_dataset", "RankSVM", "load"]
