"""What one rank of ring attention did: pairs, tiles and scores computed or skipped, and its times.

The ring's schedule (:mod:`attnlab.kernels.ring`) says which (query chunk, key chunk) pairs a step
computes; :func:`pair_work` counts the flash tiles and scores inside one pair, and the ring adds
them to a :class:`RingStats` as it computes (or skips) each pair.
"""

from __future__ import annotations

from dataclasses import dataclass

from .flash_tiles import Tiles
from .masks import EMPTY, tile_slices


@dataclass
class RingStats:
    """What one rank did, added up over the calls it was passed to (forward and backward alike).

    A *pair* is one of this rank's query chunks against one key/value chunk that visited it;
    *tiles* are the flash tiles inside the pairs; *scores* counts the query-key scores computed
    (batch x heads x rows x columns of every tile that ran): the arithmetic, up to a constant.
    """

    pairs_computed: int = 0
    pairs_skipped: int = 0  # wholly in the future of every query (causal): no arithmetic at all
    tiles_computed: int = 0
    tiles_skipped: int = 0
    scores: int = 0
    compute_s: float = 0.0  # time in the flash tiles and the merges
    wait_s: float = 0.0  # time blocked on a transfer that had not finished yet
    steps: int = 0  # ring steps taken

    def add_pair(self, work: tuple[int, int, int]) -> None:
        """A pair that ran: ``work`` = (tiles computed, tiles skipped inside it, scores computed)."""
        self.pairs_computed += 1
        self.tiles_computed += work[0]
        self.tiles_skipped += work[1]
        self.scores += work[2]

    def add_skip(self, tiles: int) -> None:
        """A pair skipped whole, with the ``tiles`` it would have had."""
        self.pairs_skipped += 1
        self.tiles_skipped += tiles


def pair_work(tiles: Tiles, NH: int) -> tuple[int, int, int]:
    """(tiles computed, tiles skipped, scores computed) of one pair under ``tiles``, for NH = batch x heads."""
    done = skipped = scores = 0
    for qt, rows in tiles.query_tiles():
        for kt, cols in tile_slices(tiles.S, tiles.block_k):
            if tiles.kind(qt, kt, rows, cols) == EMPTY:
                skipped += 1
            else:
                done += 1
                scores += NH * (rows.stop - rows.start) * (cols.stop - cols.start)
    return done, skipped, scores
