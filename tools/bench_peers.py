"""Side by side with the published peers (issue 17): start-up, linear RankSVM and exact kernel
RankSVM on MQ2008 Fold1, linear RankSVM on generated MSLR-like sets (1M rows, and time against rows),
conversion speed, Nystroem pipelines, gradient-boosted trees and exported models, each tool as a
whole process. The sections live in tools/bench/ (one module each; tools/bench/cli.py documents them
all): ``python tools/bench_peers.py --help``."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
