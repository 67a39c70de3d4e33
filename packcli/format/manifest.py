"""manifest.json: the commit point of an output. Written last and atomically; sorted keys, no timestamps.

What a manifest holds is said here twice: the functions that build an output's and a part's manifest from plain
values (:func:`run_keys`, :func:`part_manifest`, :func:`output_manifest`), and the key tables that check one read
back.

A directory whose manifest is missing or unreadable is not an output. Readers refuse a newer major format version,
and :func:`read_manifest` checks every key the readers (``verify``, ``stats``, the loader) use, once, so a damaged
or hand-edited manifest is one error naming the key, never a ``KeyError`` deep in a reader.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from packcli.errors import PackcliError
from packcli.format.columns import FORMAT_VERSION, column_names
from packcli.util.files import why_absent, write_json
from packcli.version import __version__

__all__ = [
    "EXPORT_NAME",
    "FOREIGN_MANIFEST",
    "MANIFEST_NAME",
    "RUN_DIRECTORY",
    "RUN_PREFIX",
    "SHARD",
    "SHARD_FILE",
    "SPLIT_PIECES",
    "TEMPORARY_SUFFIX",
    "TOKENIZER",
    "TOP",
    "TOTALS",
    "is_output",
    "merged_backend",
    "output_manifest",
    "part_facts",
    "part_manifest",
    "read_manifest",
    "recorded_name",
    "run_keys",
    "shard_path",
    "tokenizer_entry",
    "write_manifest",
]

MANIFEST_NAME = "manifest.json"
EXPORT_NAME = "export.json"  # an export's own manifest (packcli.export.record): a directory holding it is no output
SHARD_FILE = re.compile(r"(?:part-(\d+)-)?shard-(\d+)\.arrow")  # the names packcli gives shards: part, number
RUN_PREFIX = "packcli-run-"  # where an output on object storage keeps a run's shards: RUN_PREFIX + the run's id
RUN_DIRECTORY = re.compile(rf"{RUN_PREFIX}[0-9A-Za-z-]+")
TEMPORARY_SUFFIX = ".tmp"  # a file being written; renamed once complete
SPLIT_PIECES = "split_pieces"  # a shard entry's pieces of split documents (see packcli.write.splits)

# What a value must be: (its description in an error, the test).
Kind = tuple[str, Callable[[object], bool]]
TEXT: Kind = ("a string", lambda value: isinstance(value, str))
_INT64_MAX = 2**63 - 1  # every count packcli writes fits an int64, as its readers (numpy) take it
COUNT: Kind = ("an integer >= 0 (below 2**63)", lambda value: type(value) is int and 0 <= value <= _INT64_MAX)
POSITIVE: Kind = ("an integer >= 1 (below 2**63)", lambda value: type(value) is int and 1 <= value <= _INT64_MAX)
FLAG: Kind = ("true or false", lambda value: type(value) is bool)
INTEGER: Kind = ("an integer", lambda value: type(value) is int)
OVERFLOW: Kind = ('"split", "truncate" or "drop"', lambda value: value in ("split", "truncate", "drop"))
TOKEN_ID: Kind = ("a token id or null", lambda value: value is None or (type(value) is int and value >= 0))
OBJECT: Kind = ("an object", lambda value: isinstance(value, dict))
LIST: Kind = ("a list", lambda value: isinstance(value, list))
OPTIONAL_TEXT: Kind = ("a string or null", lambda value: value is None or isinstance(value, str))
OPTIONAL_POSITIVE: Kind = (
    "an integer >= 1 or null",
    lambda value: value is None or (type(value) is int and value >= 1),
)
NAMES: Kind = ("a list of strings", lambda value: isinstance(value, list) and all(isinstance(v, str) for v in value))

# Each block: its keys, each with its kind and whether every manifest has it (False: the additive keys of format
# version 1, which older outputs may lack; checked when present).
TOP: dict[str, tuple[Kind, bool]] = {
    "packcli_version": (TEXT, True),
    "fingerprint": (TEXT, True),
    "options": (OBJECT, True),
    "tokenizer": (OBJECT, True),
    "max_len": (POSITIVE, True),
    "strategy": (TEXT, True),
    "totals": (OBJECT, True),
    "shards": (LIST, True),
    "columns": (NAMES, False),
    "inputs": (LIST, False),
}
# The options the readers act on (verify's accounting, the loader's EOS, export's labels), where present.
OPTIONS: dict[str, tuple[Kind, bool]] = {
    "overflow": (OVERFLOW, False),
    "max_len": (POSITIVE, False),
    "eos": (FLAG, False),
    "bos": (FLAG, False),
    "shuffle": (FLAG, False),
    "seed": (INTEGER, False),
    "position_ids": (FLAG, False),
}
# A partitioned run's record (absent from a run of one partition).
PARTITIONS: dict[str, tuple[Kind, bool]] = {"count": (POSITIVE, True), "plan_hash": (TEXT, True)}
# A run on pre-tokenized records without a tokenizer has none: its sha256 and vocab_size are null.
TOKENIZER: dict[str, tuple[Kind, bool]] = {
    "sha256": (OPTIONAL_TEXT, True),
    "vocab_size": (OPTIONAL_POSITIVE, True),
    "name": (OPTIONAL_TEXT, False),
    "eos_id": (TOKEN_ID, False),
    "bos_id": (TOKEN_ID, False),
}
TOTALS: dict[str, tuple[Kind, bool]] = {
    **{key: (COUNT, True) for key in ("documents", "tokens", "sequences", "dropped_documents")},
    **{key: (COUNT, True) for key in ("truncated_tokens", "split_documents", "bad_records")},
    **{key: (COUNT, False) for key in ("input_documents", "input_tokens", "truncated_documents", "dropped_tokens")},
    **{key: (COUNT, False) for key in ("empty_documents", "supervised_tokens", "unsupervised_sequences")},
    "unread_files": (COUNT, False),
    "special_text_messages": (COUNT, False),
    "records_with_tools": (COUNT, False),
}
SHARD: dict[str, tuple[Kind, bool]] = {
    "file": (TEXT, True),
    "rows": (COUNT, True),
    "tokens": (COUNT, True),
    "bytes": (COUNT, True),
    "sha256": (TEXT, True),
    "documents": (COUNT, False),
}
# A shard entry's ``sidecars`` (format/sidecars.py; an object, where present), each by kind: the keys of each.
SIDECAR: dict[str, tuple[Kind, bool]] = {"file": (TEXT, True), "bytes": (COUNT, True), "sha256": (TEXT, True)}


def write_manifest(directory: Path, manifest: dict[str, Any], name: str = MANIFEST_NAME) -> Path:
    """Write ``manifest.json`` (or another JSON file ``name``, as ``export.json``) atomically (temporary file, fsync,
    rename), as canonical JSON."""
    return write_json(directory / name, manifest)


def is_output(directory: Path) -> bool:
    """Whether ``directory`` is a packcli output, complete or damaged: it holds a ``manifest.json`` that packcli
    wrote (it names ``packcli_version`` at its top level) or one that is no JSON, naming it or beside shards (a
    damaged one). Another tool's ``manifest.json`` (JSON naming no ``packcli_version`` at its top level) makes no
    output, even beside a file named like a shard. The one test of it: inputs skip such directories, ``stats``
    reports on them; :func:`read_manifest` then says what is wrong with a damaged one, and publication replaces
    only those it can read."""
    manifest = directory / MANIFEST_NAME
    if not manifest.is_file():
        return False
    try:
        raw = manifest.read_bytes()
        return (_VERSION_KEY in raw or _holds_shards(directory)) and _packcli_or_damaged(raw)
    except (OSError, PackcliError):  # unreadable: taken for an output, as before, so that nothing in it is read
        return True


def _holds_shards(directory: Path) -> bool:
    """Whether ``directory`` holds a file or run prefix named as packcli names its shards."""
    return any(SHARD_FILE.fullmatch(child.name) or RUN_DIRECTORY.fullmatch(child.name) for child in directory.iterdir())


_VERSION_KEY = b'"packcli_version"'
FOREIGN_MANIFEST = f"its {MANIFEST_NAME} names no packcli_version"  # why another tool's is no packcli output


def _packcli_or_damaged(raw: bytes) -> bool:
    """Whether ``raw``, a ``manifest.json`` that names ``packcli_version`` or lies beside shards, is packcli's: an
    object naming ``packcli_version`` at its top level, or no JSON at all (a write cut short leaves it so). Other
    JSON is another tool's, one that names the key inside another (a tool listing its dependencies) too."""
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError is a ValueError too
        return True
    return isinstance(manifest, dict) and "packcli_version" in manifest


def read_manifest(directory: Path) -> dict[str, Any]:
    """Read, version-check and validate an output's manifest.

    Raises:
        PackcliError: no manifest (an export, holding ``export.json``, is named as one), another tool's
            ``manifest.json`` (JSON that is no object naming ``packcli_version``, shards beside it or not; without
            shards, anything naming none), unreadable JSON, a format version this packcli cannot read, or a key that
            is missing or of the wrong type (the error names it, e.g. ``totals.tokens``).
    """
    path = directory / MANIFEST_NAME
    if not path.is_file() and (directory / EXPORT_NAME).is_file():
        raise PackcliError(
            f"is a packcli export ({EXPORT_NAME}), not a packcli output: name the output it was exported from",
            directory,
        )
    if not path.is_file():
        if not directory.exists():
            raise PackcliError(why_absent(directory), directory)
        raise PackcliError(f"no {MANIFEST_NAME}: not a packcli output (run packcli pack first)", directory)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PackcliError(f"unreadable manifest: {exc}", path) from None
    foreign = PackcliError(f"is not a packcli output: {FOREIGN_MANIFEST}", directory)
    if _VERSION_KEY not in raw and not _holds_shards(directory):  # another tool's, not a damaged one of packcli's
        raise foreign
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError is a ValueError too
        raise PackcliError(f"unreadable manifest: {exc}", path) from None
    if not isinstance(manifest, dict) or "packcli_version" not in manifest:  # shards beside it or not (is_output)
        raise foreign
    version = manifest.get("format_version")
    if type(version) is not int or version > FORMAT_VERSION or version < 1:
        raise PackcliError(
            f"format version {version!r} is not supported: this packcli {__version__} reads format version "
            f"{FORMAT_VERSION}; upgrade packcli or repack",
            path,
        )
    validate_manifest(manifest, path)
    return manifest


def validate_manifest(manifest: dict[str, Any], path: Path) -> None:
    """Check every key the readers use: present where every manifest has it, of its kind where present.

    Raises:
        PackcliError: naming the first key at fault, e.g. ``manifest key 'shards[3].bytes' is missing``.
    """
    _check_block(manifest, TOP, "", path)
    _check_block(manifest["options"], OPTIONS, "options.", path)
    _check_block(manifest["tokenizer"], TOKENIZER, "tokenizer.", path)
    if "partitions" in manifest:
        if not isinstance(manifest["partitions"], dict):
            _fail("partitions", f"must be {OBJECT[0]}, not {_shown(manifest['partitions'])}", path)
        _check_block(manifest["partitions"], PARTITIONS, "partitions.", path)
    _check_block(manifest["totals"], TOTALS, "totals.", path)
    for index, shard in enumerate(manifest["shards"]):
        if not isinstance(shard, dict):
            _fail(f"shards[{index}]", f"must be {OBJECT[0]}, not {_shown(shard)}", path)
        _check_block(shard, SHARD, f"shards[{index}].", path)
        sidecars = shard.get("sidecars", {})
        if not isinstance(sidecars, dict):
            _fail(f"shards[{index}].sidecars", f"must be {OBJECT[0]}, not {_shown(sidecars)}", path)
        for kind, sidecar in sidecars.items():
            key = f"shards[{index}].sidecars.{kind}"
            if not isinstance(sidecar, dict):
                _fail(key, f"must be {OBJECT[0]}, not {_shown(sidecar)}", path)
            _check_block(sidecar, SIDECAR, f"{key}.", path)


def _check_block(block: dict[str, Any], keys: dict[str, tuple[Kind, bool]], prefix: str, path: Path) -> None:
    for key, ((description, test), required) in keys.items():
        if key not in block:
            if required:
                _fail(prefix + key, "is missing", path)
        elif not test(block[key]):
            _fail(prefix + key, f"must be {description}, not {_shown(block[key])}", path)


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _fail(key: str, problem: str, path: Path) -> NoReturn:
    raise PackcliError(f"manifest key {key!r} {problem}: the manifest was edited or damaged; repack", path)


def shard_path(directory: Path, name: object) -> Path:
    """Resolve a shard file named in a manifest, refusing any name that leaves ``directory``: a file name, or in an
    output on object storage ``packcli-run-ID/NAME`` (the run prefix its shards were uploaded under)."""
    if isinstance(name, str) and RUN_DIRECTORY.fullmatch(name.split("/", 1)[0]) and name.count("/") == 1:
        return shard_path(directory / name.split("/", 1)[0], name.split("/", 1)[1])
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise PackcliError(f"shard path {name!r} leaves the output directory", directory / MANIFEST_NAME)
    return directory / name


def tokenizer_entry(
    described: dict[str, Any] | None, ran: bool, eos_id: int | None, bos_id: int | None
) -> dict[str, Any]:
    """The manifest's ``tokenizer``: the tokenizer's description (its keys null without one), ``ran`` (false for
    pre-tokenized records), and for pre-tokenized records the EOS/BOS ids actually appended."""
    entry = dict.fromkeys(("name", "sha256", "config_sha256", "vocab_size")) if described is None else dict(described)
    if not ran:
        entry.update(eos_id=eos_id, bos_id=bos_id)
    return {**entry, "ran": ran}


def run_keys(
    fingerprint: str,
    options: dict[str, Any],
    tokenizer: dict[str, Any],
    supervised: bool,
    positions: bool,
    partitions: dict[str, Any] | None,
) -> dict[str, Any]:
    """The keys an output and each of its parts share: format and packcli versions, the fingerprint, the
    output-relevant ``options`` (with ``max_len`` and ``strategy``), the ``tokenizer`` entry, the ``columns``, and
    a partitioned run's ``partitions`` block."""
    keys = {
        "format_version": FORMAT_VERSION,
        "packcli_version": __version__,
        "fingerprint": fingerprint,
        "options": _recorded_names(options),
        "tokenizer": _recorded_names(tokenizer),
        "max_len": options["max_len"],
        "strategy": options["strategy"],
        "columns": column_names(supervised, positions),
    }
    return keys if partitions is None else {**keys, "partitions": partitions}


def part_facts(run: dict[str, Any], plan_hash: str | None, partitions: int, options: dict[str, Any]) -> dict[str, Any]:
    """What every part of a run records in its manifest's ``part`` block, and the merge and a rerun check: the
    run's keys (:func:`run_keys`) with the tokenizer less its name (the path as spelled: the hashes and ids identify
    it), the plan hash (None: a plain run), the partition count, and ``options`` as the fingerprint sees them."""
    return {
        "fingerprint": run["fingerprint"],
        "plan_hash": plan_hash,
        "partitions": partitions,
        "options": options,
        "tokenizer": {key: value for key, value in run["tokenizer"].items() if key != "name"},
        "format_version": run["format_version"],
        "packcli_version": run["packcli_version"],
        "columns": run["columns"],
    }


def part_manifest(
    run: dict[str, Any],
    part: dict[str, Any],
    backend: dict[str, Any],
    totals: dict[str, int],
    shards: list[dict[str, Any]],
    sources: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """A part's manifest: the run's keys, the ``part`` block (:func:`part_facts` and the part's own), the tokenizer
    backend that encoded (outside the fingerprint), its totals, shards and a mixed run's ``sources``."""
    manifest = {**run, "tokenizer": {**run["tokenizer"], **backend}, "totals": totals, "part": part, "shards": shards}
    return manifest if sources is None else {**manifest, "sources": sources}


def output_manifest(
    run: dict[str, Any], inputs: list[tuple[str, int]], parts: list[dict[str, Any]], unread_files: int
) -> dict[str, Any]:
    """An output's manifest from its parts' (checked to agree, in partition order): the run's keys, the inputs
    (name, bytes), the backend that encoded (:func:`merged_backend`), the parts' totals summed and their shards in
    order, and a mixed run's ``sources`` (a mixed run is one part)."""
    totals = {key: sum(int(part["totals"][key]) for part in parts) for key in parts[0]["totals"]}
    manifest = {
        **run,
        "inputs": [{"path": name, "bytes": size} for name, size in inputs],
        "tokenizer": {**run["tokenizer"], **merged_backend(parts)},
        "totals": {**totals, "unread_files": unread_files},
        "shards": [shard for part in parts for shard in part["shards"]],
    }
    return manifest if "sources" not in parts[0] else {**manifest, "sources": parts[0]["sources"]}


def recorded_name(name: str) -> str:
    """An input's name as an output records it (``inputs``, ``sources``, the sources sidecars): as it is where it is
    UTF-8, else its bytes as the file system holds them with each byte that is no UTF-8 written ``\\xHH`` (Python's
    backslashreplace): b'caf\\xe9.jsonl' is ``caf\\xe9.jsonl``. Python reads such a byte as a lone surrogate
    (``caf\\udce9.jsonl``), which ``json.dumps`` writes and strict JSON readers (serde_json, pyarrow) refuse."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")
    return name


def _recorded_names(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` (the options, the tokenizer's description) with each text recorded as :func:`recorded_name`
    records a name: the tokenizer's path and a ``--chat-template`` file's are the user's, in any bytes."""
    return {key: recorded_name(value) if isinstance(value, str) else value for key, value in entry.items()}


def merged_backend(manifests: list[dict[str, Any]]) -> dict[str, str]:
    """The tokenizer backend of a run from its parts' manifests: the one they all used, else every one used, joined
    by "+" (a part reused from an earlier run, or a worker where the fast backend does not import), with every
    reason a part fell back for."""
    used = sorted({json.dumps(_backend(manifest["tokenizer"]), sort_keys=True) for manifest in manifests})
    backends = [json.loads(entry) for entry in used]
    if len(backends) == 1:
        return dict(backends[0])
    merged = {key: "+".join(str(backend.get(key)) for backend in backends) for key in ("backend", "backend_version")}
    reasons = sorted({backend["backend_fallback"] for backend in backends if "backend_fallback" in backend})
    return {**merged, "backend_fallback": "; ".join(reasons)} if reasons else merged


def _backend(tokenizer: dict[str, Any]) -> dict[str, Any]:
    return {key: tokenizer[key] for key in ("backend", "backend_version", "backend_fallback") if key in tokenizer}
