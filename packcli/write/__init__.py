"""Write: gather packed rows from the token store and lay them out as Arrow columns (through :mod:`packcli.format`), and
publish the output atomically (staging, lock, swap)."""
