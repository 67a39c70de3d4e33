"""The parts behind :mod:`packcli.torch` (import them from there): rows read from the shards, collate functions,
attention masks. Needs torch."""
