"""How long does an ``imagefolder`` load take, first (decoding every file) and second (from
the decode cache)?

Each load runs in a fresh Python process, as two runs of a config would, and is timed from
the source's ``load()`` call to the standardized tensors (imports excluded). The cache goes to a
fresh temporary folder (``$FEDLIGHT_CACHE``), removed at the end. Printed per load: wall
seconds, this process's CPU seconds, and the machine's 1-minute load average before it.

    python benchmarks/imagefolder_load.py --root ../shared/data/cifar10
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

_ONE_LOAD = """
import time
from fedlight.data.sources.imagefolder import ImageFolder
wall, cpu = time.perf_counter(), time.process_time()
data = ImageFolder(root={root!r}).load()
print(time.perf_counter() - wall, time.process_time() - cpu, len(data.y_train),
      len(data.y_test))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="folder with train/<class>/* (and test/)")
    args = parser.parse_args()
    cache = tempfile.mkdtemp(prefix="fedlight-cache-")
    env = {**os.environ, "FEDLIGHT_CACHE": cache}
    try:
        for label in ("first (decode)", "second (cache)"):
            load = os.getloadavg()[0]
            out = subprocess.run([sys.executable, "-c", _ONE_LOAD.format(root=args.root)],
                                 env=env, check=True, capture_output=True, text=True).stdout
            wall, cpu, n_train, n_test = out.split()
            print(f"{label:15s} wall {float(wall):6.2f} s  cpu {float(cpu):6.2f} s  "
                  f"({n_train} + {n_test} images, load average {load:.1f} before)")
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
