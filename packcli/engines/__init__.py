"""Partitioned runs: many small local runs plus a merge. The engine only schedules the partitions.

- ``driver``: plan, resume, run the partitions on an engine, merge, publish (the driver process).
- ``partition``: one partition as one local run (a worker process or a Ray actor).
- ``parts``: the parts in the staging directory: completion records and what a rerun may reuse.
- ``merge``: the parts' agreement checks, summed totals, the packing gap.
- ``local`` and ``ray``: the engines (a process pool; a Ray cluster).
"""
