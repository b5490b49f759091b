"""The tile sizes `attnlab tune` caches: read back per processor, used by the flash form, ignored when off."""

import json

import pytest
import torch

import attnlab
from attnlab import masks
from attnlab.kernels import flash, flash_band, tuned
from tests.helpers import qkv


def test_sizes_are_saved_per_machine_and_read_back(tiles_cache):
    assert tuned.current() == tuned.DEFAULT  # no file: the defaults, no error
    tiles_cache.write_text(json.dumps({"another processor | 2 threads | torch 0": {"short_q": 64}}))
    sizes = tuned.Sizes(short_q=512, long_k=512, band_rows=32, source="measured here")
    assert tuned.save(sizes) == tiles_cache
    data = json.loads(tiles_cache.read_text())
    assert data["another processor | 2 threads | torch 0"] == {"short_q": 64}  # other machines' entries kept
    assert data[tuned.key()]["short_q"] == 512
    assert tuned.current() == sizes
    assert sizes.tiles(2048) == (512, None) and sizes.tiles(8192) == (None, 512)
    from attnlab.measure.tune import in_words

    assert "tiles 512 x 256 up to T = 3072, 256 x 512 above; bands of 32 rows" in in_words(sizes)
    assert "measured here" in in_words(sizes)


def test_a_broken_cache_or_off_gives_the_defaults(tiles_cache, monkeypatch):
    tiles_cache.write_text("{not json")
    assert tuned.current() == tuned.DEFAULT
    tiles_cache.write_text(json.dumps({tuned.key(): "not an entry"}))
    tuned._LOADED.clear()
    assert tuned.current() == tuned.DEFAULT
    monkeypatch.setenv("ATTNLAB_TILES", "off")
    assert tuned.cache_path() is None and tuned.current() == tuned.DEFAULT
    with pytest.raises(ValueError, match="ATTNLAB_TILES=off"):
        tuned.save(tuned.Sizes(short_q=8))


def test_sizes_the_tuner_never_measures_are_refused_naming_the_file(tiles_cache):
    """A cache edited by hand to 1 x 1 tiles (a T = 512 bench took 14 s instead of 14 ms): refused in one warning that
    names the file and the sizes; the defaults are used for that pair, the entry's other sizes kept."""
    tiles_cache.write_text(json.dumps({tuned.key(): {"short_q": 1, "short_k": 1, "band_rows": 32}}))
    with pytest.warns(tuned.RefusedSizes) as seen:
        sizes = tuned.current()
    print(seen[0].message)
    assert len(seen) == 1 and str(tiles_cache) in str(seen[0].message) and "short tiles 1 x 1" in str(seen[0].message)
    assert sizes.tiles(2048) == (None, None) and sizes.band_rows == 32
    tiles_cache.write_text(json.dumps({tuned.key(): {"band_rows": 3, "band_batch": 7}}))
    tuned._LOADED.clear()
    with pytest.warns(tuned.RefusedSizes, match="bands of 3 rows, 7 scores"):
        assert tuned.current() == tuned.DEFAULT
    for q, k in tuned.TILES:  # every candidate the tuner can save is read back without a word
        assert tuned.Sizes(short_q=q, short_k=k, long_q=q, long_k=k).outside() == []


def test_a_refused_cache_is_one_line_on_the_command_line(tiles_cache, capsys):
    from attnlab.cli import main

    tiles_cache.write_text(json.dumps({tuned.key(): {"short_q": 1, "short_k": 1}}))
    assert main(["tune", "--show"]) == 0
    err = capsys.readouterr().err
    print(err)
    assert err.startswith(f"attnlab tune: warning: the tile cache {tiles_cache} holds sizes") and err.count("\n") == 1


def test_the_flash_form_takes_the_tuned_tiles_and_a_size_by_hand_wins(monkeypatch):
    """With tuned sizes the flash form's plan takes those tiles (and bands), and gives exactly what passing them by
    hand gives; sizes passed by hand are used whatever is tuned; the plan says where its sizes came from."""
    asked = []
    bands = flash_band.bands
    monkeypatch.setattr(flash_band, "bands", lambda *a, **kw: asked.append((a[5], a[7])) or bands(*a, **kw))
    q, k, v = qkv(1, 2, 2, 40, 40, 8, 8, dtype=torch.float32)
    window = masks.sliding_window(4)
    with tuned.using(tuned.Sizes(short_q=8, short_k=16, band_rows=4, band_batch=200, source="a test")):
        plans = [flash.plan(q, k, v, is_causal=True), flash.plan(q, k, v, attn_mask=window),
                 flash.plan(q, k, v, is_causal=True, block_q=32, block_k=4)]
        got = attnlab.attention(q, k, v, impl="flash", is_causal=True)
    print(*plans, sep="\n")
    assert [(p.tiles.block_q, p.tiles.block_k) for p in plans] == [(8, 16), (8, 16), (32, 4)]
    assert [p.sizes for p in plans] == ["tuned: a test", "tuned: a test", "given"]
    assert plans[1].path == "bands" and plans[1].bands.block_q == 4
    assert asked and set(asked) == {(4, 200)}  # (asked for the causal mask too: it has no bands)
    assert torch.equal(got, attnlab.attention(q, k, v, impl="flash", is_causal=True, block_q=8, block_k=16))
    p = flash.plan(q, k, v, is_causal=True)
    assert (p.tiles.block_q, p.tiles.block_k) == (40, 40)  # the default 256 (key tiles widened: fewer rows), cut
    assert p.sizes.startswith("block_q default, block_k widened")


def test_bad_tile_sizes_are_still_refused():
    q, k, v = qkv(1, 2, 2, 8, 8, 4, 4, dtype=torch.float32)
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="block_q"):
            attnlab.attention(q, k, v, impl="flash", block_q=bad)


def test_a_cache_edited_by_hand_leaves_bad_sizes_to_the_defaults(tiles_cache):
    """A size that is not a positive integer never reaches the flash form: every call still runs."""
    tiles_cache.write_text(json.dumps({tuned.key(): {"short_q": "64", "short_k": -8, "long_q": 2.5, "long_k": True,
                                                     "band_rows": 0, "band_batch": 4096, "source": "by hand"}}))
    with pytest.warns(tuned.RefusedSizes, match="bands of None rows, 4096 scores"):  # (64, 4096): no candidate
        sizes = tuned.current()
    assert sizes.tiles(100) == (None, None) and sizes.tiles(10_000) == (None, None)
    assert sizes.band_rows is None and sizes.band_batch is None and sizes.source == "by hand"
    q, k, v = qkv(1, 2, 2, 40, 40, 8, 8, dtype=torch.float32)
    torch.testing.assert_close(attnlab.attention(q, k, v, impl="flash", is_causal=True),
                               attnlab.attention(q, k, v, impl="matrix", is_causal=True))


def test_using_is_local_to_its_thread():
    import threading

    seen = []
    with tuned.using(tuned.Sizes(short_q=8)):
        t = threading.Thread(target=lambda: seen.append(tuned.current()))
        t.start()
        t.join()
        assert tuned.current().short_q == 8
    assert seen == [tuned.current()] and seen[0].short_q is None
