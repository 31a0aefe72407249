"""Exported models on the consumers' side (issue 32): the section lives in tools/bench/export.py;
``python tools/bench_export.py [...]`` and ``python tools/bench_peers.py --only export`` both run it
(``--help`` lists its options)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench.export import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
