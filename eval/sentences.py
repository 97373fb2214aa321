"""Sentence-level dense pieces for the mirror, with the product's own cutter (``episodic.domain.chunking``).

``pieces(text, mode, window)``: ``window`` is the store's token-window chunker (256/32).

- ``s1``: every sentence its own piece (``episodic.domain.chunking`` with 1 word: nothing is packed);
- ``pN``: consecutive sentences packed greedily into pieces of at most N words (the product's
  ``EPISODIC_CHUNK_MODE=sentences`` with ``EPISODIC_CHUNK_WORDS=N``);
- a leading ``+`` keeps the store's windows too (max-sim over both).
"""

from __future__ import annotations

from collections.abc import Callable

from episodic.domain.chunking import pieces as product_pieces


def pieces(text: str, mode: str, window: Callable[[str], list[str]]) -> list[str]:
    both = mode.startswith("+")
    mode = mode.lstrip("+")
    if mode == "s1":
        words = 1
    elif mode.startswith("p") and mode[1:].isdigit():
        words = int(mode[1:])
    else:
        raise ValueError(f"unknown split mode {mode!r} (s1, pN, +pN)")
    flat = product_pieces(text, "sentences", words, window)
    if both:
        flat = list(dict.fromkeys(window(text) + flat))
    return flat
