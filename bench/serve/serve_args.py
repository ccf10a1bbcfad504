"""The command line of bench/serve's scripts: [BIN_DIR] [TRAIN_ROWS] [SECS] [ROUNDS], by
position, each with its default (SECS: the caller's, per case or per point)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse(default_secs):
    """(bin_dir, train_rows, secs, rounds) from sys.argv."""
    a = sys.argv + [None] * 4
    return (a[1] or os.path.join(ROOT, "build", "bin"), int(a[2] or 50000),
            float(a[3] or default_secs), int(a[4] or 3))
