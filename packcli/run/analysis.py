"""Corpus analysis, the pipeline behind ``stats`` on a raw corpus: set up as ``pack`` does, tokenize once (into the
tokenization cache, for the ``pack`` that follows), then pack with every registered strategy and compare, writing
no shards. The figures are :mod:`packcli.report.stats`'s, so a raw corpus and a packed output report alike.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from packcli.encode import cache
from packcli.encode.chat import chat_totals
from packcli.encode.corpus import tokenize_corpus
from packcli.encode.encoders import make_encoder
from packcli.options import PackOptions
from packcli.packing.overflow import apply_overflow
from packcli.read.inputs import Spool
from packcli.report.max_len import RowFigures, length_percentiles, max_len_candidates
from packcli.report.stats import DEFAULT_BATCH_SIZE, Measured, sequence_stats
from packcli.run.setup import check_documents, set_up
from packcli.strategies import available_strategies, run_strategy
from packcli.util.progress import Reporter, SilentReporter

__all__ = ["measure_corpus"]


def measure_corpus(
    inputs: list[str],
    options: PackOptions,
    batch_size: int = DEFAULT_BATCH_SIZE,
    warn: Callable[[str], None] = lambda message: None,
    reporter: Reporter | None = None,
    stdin: Spool | None = None,
    row_figures: RowFigures | None = None,
) -> Measured:
    """Tokenize a raw corpus once (into the cache, for the ``pack`` that follows) and compare every strategy: the
    figures of ``options.strategy``, with ``strategies`` (each one's), ``lengths`` (percentiles) and
    ``max_len_candidates`` (what other ``--max-len`` values would cost; with ``row_figures``, as ``split.model_cost``).
    """
    reporter = reporter or SilentReporter()
    setup = set_up(inputs, options, warn, stdin, encodes=False)  # tokens from the cache need no fast backend built
    key = setup.cache_key()
    tokenized = cache.load(key, options.tokenizer_backend)
    if tokenized is None:
        encoder = make_encoder(options, setup.tokenizer, template_source=setup.template_source())  # warned at set-up
        store = cache.new_store_path(key)
        fresh = tokenize_corpus(setup.files, encoder, options.skip_bad_records, store, reporter, warn)
        tokenized = cache.save(fresh, key)
    tokenized.store.close()
    counts = tokenized.counts
    pieces, overflow = apply_overflow(tokenized.lengths, options.max_len, options.overflow_policy)
    extra = {
        **overflow.to_json(),
        "input_documents": len(tokenized.lengths),
        "input_tokens": int(tokenized.lengths.sum()),
        "bad_records": counts.bad_records,
        "empty_documents": counts.empty_documents,
        "overflow": options.overflow_policy.value,
        "window": options.window,
    }
    check_documents(len(tokenized.lengths), {**extra, "documents": len(pieces.length)}, setup.files, options)  # as pack
    reporter.stage("comparing strategies")
    extra.update(chat_totals(counts, options))  # as pack's manifest has them
    compared, packings = {}, {}
    for name in available_strategies():
        packing = run_strategy(name, pieces.length, options.max_len, options.seed, options.window)
        packings[name] = (pieces.length[packing.order], np.diff(packing.offsets))
        compared[name] = {
            **sequence_stats(*packings[name], options.max_len, batch_size, options.seed),
            **extra,
            "strategy": name,
        }
    reporter.stage("max_len candidates")
    figures = {
        **compared[options.strategy],
        "strategies": compared,
        "lengths": length_percentiles(tokenized.lengths),
        "max_len_candidates": max_len_candidates(
            tokenized.lengths, options.max_len, options.strategy, options.seed, row_figures
        ),
        "tokenization_cache": str(cache.cache_root() / key),
    }
    reporter.close()
    return Measured(figures, *packings[options.strategy], tokenized.lengths)
