"""Report: what an output holds and whether it is sound (stats, verify), for people and for machines."""
