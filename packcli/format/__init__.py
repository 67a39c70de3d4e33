"""The output format, the contract every reader and writer shares: the shard schema and its rules (``schema``), the
shard reader beside the writer (``shards``), and ``manifest.json`` (build, write, read, validate). The loader and
the reports read through this package alone; a change to the shard format goes here (and to docs/format.md)."""
