"""Runs docs/distributed.md's queries with polars (Python) and DuckDB over the Parquet files
that `steptrace analyze --rank-output DIR` wrote, and checks them against steptrace's own
`ranks.csv` and `ranks.json` for the same ranks (issue 18: an existing engine can do the merge).

    python3 benches/merge_queries.py RANK_OUTPUT_DIR STEPTRACE_OUT_DIR   # pip install polars duckdb

Prints one line per check and exits 1 when one differs."""

import csv
import json
import os
import sys


def main():
    ro, out = sys.argv[1], sys.argv[2]
    import duckdb
    import polars as pl

    glob = lambda what: os.path.join(ro, "rank*.%s.parquet" % what)
    ours = {int(r["rank"]): r for r in csv.DictReader(open(os.path.join(out, "ranks.csv")))}
    bad = 0

    def check(what, got, want):
        nonlocal bad
        ok = got == want
        bad += not ok
        print("%-48s %s  (%s vs steptrace %s)" % (what, "ok" if ok else "DIFFERS", got, want))

    # ranks.csv's breakdown, polars and DuckDB.
    s = pl.read_parquet(glob("summary")).sort("rank")
    s = s.with_columns(idle_pct=(100 * pl.col("idle_ns") / pl.col("gpu_span_ns")).round(2))
    d = duckdb.sql("SELECT rank, round(100.0 * idle_ns / gpu_span_ns, 2) AS idle_pct "
                   "FROM read_parquet('%s') ORDER BY rank" % glob("summary")).fetchall()
    for (rank, idle), (rank_d, idle_d) in zip(s.select("rank", "idle_pct").iter_rows(), d):
        check("polars idle_pct rank %d" % rank, "%.2f" % idle, ours[rank]["idle_pct"])
        check("duckdb idle_pct rank %d" % rank_d, "%.2f" % idle_d, ours[rank_d]["idle_pct"])

    # Matched collectives: who arrived last and the waiting each rank caused.
    c = pl.read_parquet(glob("collectives"))
    key = ["iteration", "pg", "seq"]
    c = c.filter(pl.len().over(key) > 1).with_columns(
        shortest=pl.col("dur_ns").min().over(key),
        last_rank=pl.col("rank").sort_by(["dur_ns", "rank"]).first().over(key),
    )
    waits = (c.group_by(key + ["last_rank"])
              .agg(wait_ns=(pl.col("dur_ns") - pl.col("shortest")).sum())
              .group_by("last_rank").agg(pl.col("wait_ns").sum(), last_arrivals=pl.len()))
    dw = duckdb.sql("""
        WITH c AS (SELECT * FROM read_parquet('%s')),
        k AS (SELECT iteration, pg, seq, min(dur_ns) AS shortest, arg_min(rank, dur_ns) AS last_rank
              FROM c GROUP BY iteration, pg, seq HAVING count(*) > 1)
        SELECT k.last_rank, count(DISTINCT (k.iteration, k.pg, k.seq)), sum(c.dur_ns - k.shortest)
        FROM c JOIN k USING (iteration, pg, seq) GROUP BY k.last_rank""" % glob("collectives")).fetchall()
    for engine, rows in (("polars", waits.select("last_rank", "last_arrivals", "wait_ns").iter_rows()),
                         ("duckdb", dw)):
        for rank, last, wait in rows:
            check("%s last_arrivals rank %d" % (engine, rank), str(last), ours[rank]["last_arrivals"])
            check("%s wait_caused_us rank %d" % (engine, rank), "%.3f" % (wait / 1e3),
                  ours[rank]["wait_caused_us"])
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
