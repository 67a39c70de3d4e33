"""Read: find the input files and stream the chosen fields of their records, checked, in batches."""
