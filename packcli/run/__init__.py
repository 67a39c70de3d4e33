"""Running a pack, the only package that knows the stage order: ``setup`` (shared by pack and stats; the run's
identity), ``job`` (one job on any engine: read -> encode -> overflow -> pack -> write one part), ``plan`` (the
partition plan), ``driver`` (plan -> engine -> merge -> publish), ``parts`` (the parts of a run and their merge),
``sources`` (mixing's inputs), ``analysis`` (stats of a raw corpus), ``dry_run`` and ``progress``."""
