"""Write: gather packed rows from the token store and lay them out as Arrow columns (through :mod:`packcli.format`), and
publish the output atomically (staging, lock, swap; for an output URL, :mod:`packcli.write.remote`: a lock object,
an upload under a run prefix and the manifest written last)."""
