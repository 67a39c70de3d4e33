"""The parts behind :mod:`packcli.torch` (import them from there): the dataset and its epochs, batches on a device,
rows read from the shards and their figures, the order of a rank's rows and the balanced placement, resumable
states, collate functions, attention masks. ``balance``, ``order`` and ``row_figures`` are numpy alone; the rest
needs torch."""
