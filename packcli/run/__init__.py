"""Running a pack, the only package that knows the stage order: ``setup`` (shared by pack and stats), ``job`` (one
job on any engine: read -> encode -> overflow -> pack -> write one part), ``plan`` (the partition plan), ``driver``
(plan -> engine -> merge -> publish; a plain run is the one partition of ``Plan.whole`` on the in-process engine),
``parts`` and ``merge`` (the parts in the staging directory and their merge), ``sources`` (mixing's inputs),
``analysis`` (stats of a raw corpus) and ``progress``."""
