"""Running a pack, the only package that knows the stage order: ``setup`` (shared by pack and stats), ``local`` (one
local run: read -> encode -> overflow -> pack -> write one part), ``plan`` (the partition plan), ``driver`` (plan
-> engine -> merge -> publish; a plain run is one partition on the in-process engine), ``parts`` and ``merge`` (the
parts in the staging directory and their merge), ``sources`` (mixing's inputs), ``analysis`` (stats of a raw
corpus) and ``progress``."""
