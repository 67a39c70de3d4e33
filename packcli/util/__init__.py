"""Generic helpers several stages share, knowing nothing of packing: file locks, atomic writes, a file's sha256,
cumulative sums, and the signals that unwind a command."""
