"""Plan: decide, from document lengths alone, which pieces of which documents go into the output."""
