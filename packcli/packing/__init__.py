"""Decisions on lengths alone, before writing: overflow (split, truncate, drop), mixing draws, the row order, and
what other ``max_len`` values would cost. Pure numpy; the strategies themselves are :mod:`packcli.strategies`."""
