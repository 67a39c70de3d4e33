"""Write: lay packed rows out as Arrow columns, write shards and the manifest, publish the output atomically."""
