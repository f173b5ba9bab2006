"""Ground truth for the memory pools steptrace reads from a snapshot: Python's own pickle module
reads the snapshot torch wrote (`torch.cuda.memory._snapshot()`, the dict of `segments` that
`torch.cuda.memory_snapshot()` returns) and sums each pool's segments as torch states them.
Run on a snapshot this project captured (a pickle is code to Python: never on one from
elsewhere).

    python3 capture/corpus/snapshot_pools.py SNAPSHOT.pickle.gz > pools_python.json
"""

import gzip
import json
import pickle
import sys


def main():
    with gzip.open(sys.argv[1], "rb") as f:
        snap = pickle.load(f)
    pools = {}
    for seg in snap["segments"]:
        key = "%d,%d" % tuple(seg["segment_pool_id"])
        p = pools.setdefault(key, {"segments": 0, "reserved_bytes": 0, "allocated_bytes": 0})
        p["segments"] += 1
        p["reserved_bytes"] += seg["total_size"]
        p["allocated_bytes"] += seg["allocated_size"]
    json.dump({"reserved_bytes": sum(p["reserved_bytes"] for p in pools.values()), "pools": pools},
              sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
