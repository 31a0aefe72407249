"""streamrank: pairwise ranking SVMs on learning-to-rank data larger than memory."""

from streamrank._native import memory as _memory
from streamrank._version import __version__
from streamrank.io.dataset import Dataset, open_dataset
from streamrank.estimator import CLSRRank, RankSVM, load

_memory.configure()

__all__ = ["__version__", "Dataset", "open_dataset", "RankSVM", "CLSRRank", "load"]
