"""Level 7 reads its tile slips from its lse cases too: they run more tiles than the graded cases, so a causal mask
compared inside the tiles may show there alone -- named from the lse by the judge's reading rule, not said as "your
lse is not the log-sum-exp" only; a lse off by what no slip gives is still said so, and nothing more."""

from attnlab.lab.levels import forwards, tiles, triton

RIGHT = tiles.Slip()


def _keys(slip: tiles.Slip = RIGHT, off: float = 0.0):
    def lse_of(q, k, v, case):  # the kernel's tiles, in float32 (the lse the level asks for)
        q, k, v = (t.float() for t in (q, k, v))
        return tiles.forward(q, k, v, case.is_causal, triton.BLOCK_M, triton.BLOCK_N, slip)["lse"] + off

    return triton.extra_rows(lambda h: forwards.lse_values(lse_of, triton.LSE_CASES, h["seed"]), "k", 0)[1]


def test_a_causal_mask_compared_inside_the_tiles_is_named_from_the_lse_cases():
    keys = _keys(tiles.Slip(local="both"))
    print(keys)
    assert keys[0] == "tile-mask", keys


def test_an_lse_off_by_what_no_slip_gives_names_no_slip():
    assert _keys(off=0.3) == ["lse-wrong"]


def test_a_right_lse_names_nothing():
    assert _keys() == []
