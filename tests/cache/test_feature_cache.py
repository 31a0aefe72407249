"""FeatureCache: on-disk and in-memory tiers of mapped blocks, damage handling, cap, full disk."""

import errno
import json
import logging
import math
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

from streamrank.cache import feature_cache as fc
from streamrank.errors import ParameterError, StreamrankError
from streamrank.cache.feature_cache import CacheDiskFull, FeatureCache, array_digest, choose, measure_map_rate

LAYOUT = [(0, 7), (7, 20), (20, 21), (21, 40)]
WIDTH = 5


def material(gamma=0.5, fingerprint="f" * 64):
    return {"fingerprint": fingerprint, "map": {"kind": "rff", "gamma": gamma, "components": WIDTH, "seed": 0},
            "arrays": array_digest(np.arange(6.0))}


def block(k, layout=LAYOUT, salt=0):
    a, b = layout[k]
    rng = np.random.default_rng(1000 * salt + k)
    x = rng.standard_normal((b - a, WIDTH)).astype(np.float32)
    if x.size > 3:  # bit patterns that a lossy path would change
        x.flat[0], x.flat[1], x.flat[2] = -0.0, np.inf, np.float32(1e-45)
    return x


def fill(c, ks=None, salt=0):
    for k in range(c.n_blocks) if ks is None else ks:
        assert c.put(k, block(k, c.layout, salt))


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def open_cache(tmp_path, **kw):
    kw.setdefault("key_material", material())
    return FeatureCache(tmp_path, kw.pop("key_material"), kw.pop("layout", LAYOUT), WIDTH, **kw)


def test_round_trip_bit_identical(tmp_path):
    with open_cache(tmp_path) as c:
        assert not c.complete and c.present == []
        fill(c)
        assert c.complete and c.nbytes == 40 * WIDTH * 4
    with open_cache(tmp_path) as c:  # a new run (say the next C): same key, same directory
        assert c.complete
        for k in range(c.n_blocks):
            got = c.get(k)
            assert same_bits(got, block(k))
            out = np.empty_like(block(k))
            assert c.get(k, out=out) is out and same_bits(out, block(k))
        assert c.stats.disk_reads == 8 and c.stats.misses == 0 and c.stats.bytes_read == 2 * c.nbytes
    m = json.loads((c.dir / "manifest.json").read_text())
    assert m["format"] == "streamrank-feature-cache" and m["version"] == 1 and m["complete"]
    assert m["key_material"]["key_material"] == material() and m["key"] == c.key
    assert m["blocks"]["1"] == {"file": "block-00001.bin", "rows": 13, "bytes": 13 * WIDTH * 4,
                                "crc32": fc._crc32(block(1))}
    assert c.dir.name == f"features-{c.key[:16]}"
    assert sorted(p.name for p in c.dir.iterdir()) == sorted(
        ["lock", "manifest.json"] + [fc.block_name(k) for k in range(4)])


def test_key_separates_maps_and_layouts(tmp_path):
    keys = {open_cache(tmp_path).key, open_cache(tmp_path, key_material=material(gamma=0.25)).key,
            open_cache(tmp_path, layout=LAYOUT[:3]).key,
            FeatureCache(tmp_path, material(), LAYOUT, WIDTH, dtype=np.float64).key,
            open_cache(tmp_path, key_material=material(fingerprint="e" * 64)).key}
    assert len(keys) == 5
    # numpy scalars in the key material are normalised, arrays are refused
    assert open_cache(tmp_path, key_material={**material(), "x": np.float64(0.5)}).key == \
        open_cache(tmp_path, key_material={**material(), "x": 0.5}).key
    with pytest.raises(TypeError, match="array_digest"):
        open_cache(tmp_path, key_material={"landmarks": np.zeros(3)})


def test_put_refuses_other_dtype_or_shape(tmp_path):
    with open_cache(tmp_path) as c:
        with pytest.raises(ValueError, match="nothing is converted"):
            c.put(0, block(0).astype(np.float64))
        with pytest.raises(ValueError):
            c.put(0, block(1))
        with pytest.raises(ValueError, match="out must be"):
            c.get(0, out=np.empty((7, WIDTH), np.float64))
        with pytest.raises(IndexError):
            c.get(4)


def test_foreign_cache_is_rebuilt(tmp_path, caplog):
    with open_cache(tmp_path) as a:
        fill(a)
    other = open_cache(tmp_path, key_material=material(gamma=2.0))
    other.close()
    os.rename(a.dir, tmp_path / "elsewhere")
    for p in other.dir.iterdir():
        p.unlink()
    other.dir.rmdir()
    os.rename(tmp_path / "elsewhere", other.dir)  # a's blocks under b's name
    with caplog.at_level(logging.WARNING, "streamrank.cache.feature_cache"):
        with open_cache(tmp_path, key_material=material(gamma=2.0)) as b:
            assert b.present == [] and all(b.get(k) is None for k in range(4))
            assert not any(p.name.startswith("block-") for p in b.dir.iterdir())
            fill(b, salt=1)
    assert "foreign key" in caplog.text and "rebuilding" in caplog.text
    with open_cache(tmp_path, key_material=material(gamma=2.0)) as b:
        assert b.complete and same_bits(b.get(3), block(3, salt=1))


@pytest.mark.parametrize("damage", ["truncate", "garbage", "version", "flip-crc", "missing"])
def test_damaged_or_unknown_manifest_is_discarded(tmp_path, caplog, damage):
    with open_cache(tmp_path) as c:
        fill(c)
    mpath = c.dir / "manifest.json"
    text = mpath.read_text()
    if damage == "truncate":
        mpath.write_text(text[: len(text) // 2])
    elif damage == "garbage":
        mpath.write_bytes(b"\xff\x00not json")
    elif damage == "version":
        m = json.loads(text)
        m["version"] = 2
        mpath.write_text(json.dumps(m))
    elif damage == "flip-crc":  # valid JSON, plausible content, but edited: the manifest's checksum fails
        m = json.loads(text)
        m["blocks"]["0"]["crc32"] ^= 1
        mpath.write_text(json.dumps(m))
    else:
        mpath.unlink()
    with caplog.at_level(logging.WARNING, "streamrank.cache.feature_cache"):
        with open_cache(tmp_path) as c:
            assert c.present == [] and c.get(0) is None
            assert sorted(p.name for p in c.dir.iterdir()) == ["lock", "manifest.json"]
    assert "rebuilding" in caplog.text


def test_damaged_block_is_dropped_then_rewritten(tmp_path, caplog):
    with open_cache(tmp_path) as c:
        fill(c)
    path = c.dir / fc.block_name(1)
    raw = bytearray(path.read_bytes())
    raw[17] ^= 0x10
    path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, "streamrank.cache.feature_cache"):
        with open_cache(tmp_path) as c:
            assert same_bits(c.get(0), block(0))
            assert c.get(1) is None
            assert c.stats.damaged == 1 and c.stats.misses == 1 and not c.complete
            assert not path.exists() and "1" not in json.loads((c.dir / "manifest.json").read_text())["blocks"]
            assert c.put(1, block(1))  # the caller recomputes it
            assert same_bits(c.get(1), block(1))
    assert "checksum does not match" in caplog.text and str(path) in caplog.text
    with open_cache(tmp_path) as c:
        assert c.complete and same_bits(c.get(1), block(1))


@pytest.mark.parametrize("how", ["truncated", "deleted"])
def test_truncated_or_missing_block_file(tmp_path, how):
    with open_cache(tmp_path) as c:
        fill(c)
        path = c.dir / fc.block_name(3)
        if how == "truncated":
            path.write_bytes(path.read_bytes()[:-4])
        else:
            path.unlink()
        assert c.get(3) is None and c.stats.damaged == 1
        assert c.put(3, block(3)) and same_bits(c.get(3), block(3))


def test_partial_cache_is_used_and_leftovers_are_removed(tmp_path):
    with open_cache(tmp_path) as c:
        fill(c, [0, 2])
        # an interrupted write by some process: a temporary file and a renamed but unlisted block
        (c.dir / f".{fc.block_name(1)}.99999.tmp").write_bytes(b"x" * 10)
        (c.dir / fc.block_name(3)).write_bytes(block(3).tobytes())
    with open_cache(tmp_path) as c:
        assert c.present == [0, 2] and not c.complete
        assert same_bits(c.get(0), block(0)) and same_bits(c.get(2), block(2))
        assert c.get(1) is None and c.get(3) is None and c.stats.damaged == 0
        assert sorted(p.name for p in c.dir.iterdir()) == sorted(
            ["lock", "manifest.json", fc.block_name(0), fc.block_name(2)])


def test_two_users_of_one_cache_keep_each_others_blocks(tmp_path):
    a, b = open_cache(tmp_path), open_cache(tmp_path)
    fill(a, [0])
    fill(b, [1, 3])
    fill(a, [2])
    a.close(), b.close()
    with open_cache(tmp_path) as c:
        assert c.complete and all(same_bits(c.get(k), block(k)) for k in range(4))


def test_memory_tier_accounting(tmp_path):
    sizes = [(b - a) * WIDTH * 4 for a, b in LAYOUT]
    budget = sizes[0] + sizes[1] + sizes[2]  # blocks 0, 1, 2 fit; 3 does not
    with open_cache(tmp_path, memory_bytes=budget) as c:
        fill(c)  # puts also fill the tier (copies: the caller's buffer may be reused)
        assert c.memory_nbytes == budget
        for _ in range(2):  # two more passes: the same blocks come from memory every time
            got = [c.get(k) for k in range(4)]
            assert all(same_bits(g, block(k)) for k, g in enumerate(got))
        assert c.stats.memory_hits == 6 and c.stats.disk_reads == 2 and c.stats.misses == 0
        assert not got[0].flags.writeable  # the tier's own array, no copy
        out = np.zeros_like(block(1))
        assert c.get(1, out=out) is out and same_bits(out, block(1))
    # a fresh run fills the tier from disk reads (first come, nothing evicted)
    with open_cache(tmp_path, memory_bytes=sizes[3]) as c:
        for _ in range(3):
            for k in (3, 0, 1, 2):
                assert same_bits(c.get(k), block(k))
        assert c.stats.memory_hits == 2 and c.stats.disk_reads == 10
    # no cache_dir: memory only
    m = FeatureCache(None, material(), LAYOUT, WIDTH, memory_bytes=sizes[0])
    assert m.get(0) is None and m.put(0, block(0)) is False and m.put(1, block(1)) is False
    assert same_bits(m.get(0), block(0)) and m.get(1) is None
    assert (m.stats.memory_hits, m.stats.misses) == (1, 2)


def _age(c, seconds):
    """Pretend cache ``c`` was last used ``seconds`` ago."""
    p = c.dir / "manifest.json"
    m = json.loads(p.read_text())
    m.pop("checksum")
    m["last_used"] = time.time() - seconds
    m["checksum"] = fc.zlib.crc32(fc.canonical_json(m).encode())
    p.write_text(json.dumps(m))


def test_size_cap_evicts_least_recently_used_other_cache(tmp_path):
    one = 40 * WIDTH * 4  # bytes of one complete cache's blocks
    caches = []
    for g in (1.0, 2.0, 3.0):
        with open_cache(tmp_path, key_material=material(gamma=g)) as c:
            fill(c)
        caches.append(c)
    _age(caches[0], 100)
    _age(caches[1], 200)  # the least recently used
    overhead = max(fc._usage(tmp_path).values()) - one  # manifest (and lock) bytes per cache
    cap = 3 * (one + overhead) - 300  # two complete caches and blocks 0, 1 (400 B) of a third, not block 3 too
    with open_cache(tmp_path, key_material=material(gamma=4.0), size_cap=cap) as d:
        fill(d, [0])  # needs room: evicts gamma=2 only
        assert d.stats.evicted_caches == 1
        assert not caches[1].dir.exists() and caches[0].dir.exists() and caches[2].dir.exists()
        assert sum(fc._usage(tmp_path).values()) <= cap
        # a cache in use by anyone is never evicted: holding both remaining ones, d cannot grow
        users = [open_cache(tmp_path, key_material=material(gamma=g)) for g in (1.0, 3.0)]
        fill(d, [1])
        assert d.put(3, block(3)) is False and d.stats.refused == 1
        assert caches[0].dir.exists() and caches[2].dir.exists() and d.present == [0, 1]
        assert d.get(3) is None  # the caller recomputes blocks beyond the cap
        for u in users:
            u.close()
        assert d.put(3, block(3)) is True and d.stats.evicted_caches == 2
        assert sum(fc._usage(tmp_path).values()) <= cap
    assert not any(p.name.startswith(fc.EVICTING_PREFIX) for p in tmp_path.iterdir())


def test_size_cap_smaller_than_one_cache(tmp_path):
    # blocks of 7, 13, 1 and 19 rows (140, 260, 20, 380 bytes). The manifest's length varies by a
    # few bytes (its time stamp and checksum are printed numbers), so the cap is set from the usage
    # measured after block 0: room for block 2 and its manifest entry (~100 bytes), not for 1 or 3
    with open_cache(tmp_path, size_cap=1 << 20) as c:
        stored = [c.put(0, block(0))]
        cap = c.size_cap = sum(fc._usage(tmp_path).values()) + 200
        stored += [c.put(k, block(k)) for k in range(1, 4)]
        assert stored == [True, False, True, False] and c.stats.refused == 2
        assert sum(fc._usage(tmp_path).values()) <= cap
        assert c.dir.exists()  # never evicts itself


def _no_temp_files(d):
    return not [p for p in d.iterdir() if p.name.endswith(".tmp")]


def test_full_disk_while_writing_a_block(tmp_path, monkeypatch):
    with open_cache(tmp_path) as c:
        fill(c, [0])

        def full(f, data):
            f.write(bytes(memoryview(data)[:8]))
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(fc, "_write_all", full)
        with pytest.raises(CacheDiskFull) as err:
            c.put(1, block(1))
        msg = str(err.value)
        assert isinstance(err.value, StreamrankError)
        assert str(c.dir) in msg and "260 B" in msg and "cache_dir=DIR" in msg and "recompute" in msg
        assert _no_temp_files(c.dir) and not (c.dir / fc.block_name(1)).exists()
        assert c.present == [0] and c.get(1) is None
        monkeypatch.undo()
        assert c.put(1, block(1))
    with open_cache(tmp_path) as c:
        assert c.present == [0, 1] and same_bits(c.get(1), block(1))


def test_full_disk_while_writing_the_manifest(tmp_path, monkeypatch):
    with open_cache(tmp_path) as c:
        fill(c, [0])
        real, calls = fc._write_all, []

        def full_on_second(f, data):
            calls.append(1)
            if len(calls) == 2:  # the block went through, the manifest does not
                raise OSError(errno.EDQUOT, "Disk quota exceeded")
            real(f, data)

        monkeypatch.setattr(fc, "_write_all", full_on_second)
        with pytest.raises(CacheDiskFull, match="quota"):
            c.put(2, block(2))
        assert _no_temp_files(c.dir) and not (c.dir / fc.block_name(2)).exists()
        assert c.present == [0]
    with open_cache(tmp_path) as c:
        assert c.present == [0] and same_bits(c.get(0), block(0))


def test_full_disk_measured_before_writing(tmp_path, monkeypatch):
    with open_cache(tmp_path) as c:
        monkeypatch.setattr(fc, "_free_bytes", lambda p: 100)
        with pytest.raises(CacheDiskFull, match="100 B free"):
            c.put(3, block(3))
        assert c.present == [] and _no_temp_files(c.dir)


def test_verify_once_trusts_an_unchanged_file(tmp_path, monkeypatch):
    with open_cache(tmp_path) as c:
        fill(c)
    checked = []
    real = fc._crc32
    monkeypatch.setattr(fc, "_crc32", lambda a: checked.append(1) or real(a))
    with open_cache(tmp_path, verify="once") as c:
        for _ in range(3):
            assert same_bits(c.get(2), block(2))
        assert len(checked) == 1
        path = c.dir / fc.block_name(2)
        raw = bytearray(path.read_bytes())
        raw[0] ^= 1
        path.write_bytes(bytes(raw))
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # mtime moves even on a coarse clock
        assert c.get(2) is None and c.stats.damaged == 1
    before = len(checked)
    with open_cache(tmp_path) as c:
        for _ in range(2):
            assert same_bits(c.get(0), block(0))
        assert len(checked) == before + 2  # "always": every disk read is checked


def test_no_memory_maps():
    src = Path(fc.__file__).read_text()
    assert not re.search(r"memmap\s*\(|import mmap|\bmmap\.", src)


def test_choose_boundaries():
    # reading a 4000-byte row at 4e9 B/s costs 1 us; mapping at 1e6 rows/s costs 1 us: a tie recomputes
    assert choose(4e9, 1e6, 4000)[0] == "recompute"
    assert "tie" in choose(4e9, 1e6, 4000)[1]
    assert choose(4e9 * 1.001, 1e6, 4000)[0] == "cache"
    assert choose(4e9, 1e6 * 1.001, 4000)[0] == "recompute"
    decision, why = choose(4e9, 25e3, 4000)
    assert decision == "cache" and "40x cheaper" in why and "25 krows/s" in why
    decision, why = choose(200e6, 2e5, 4000)
    assert decision == "recompute" and "4x cheaper" in why
    assert choose(math.inf, 1e6, 4000)[0] == "cache"
    assert choose(4e9, math.inf, 4000)[0] == "recompute"  # identity map: nothing to cache
    assert choose(4e9, 25e3, 4000, force="recompute") == ("recompute", "recompute (forced)")
    assert choose(1.0, 1e9, 4000, force="cache")[0] == "cache"
    assert choose(4e9, 25e3, 4000, force="auto")[0] == "cache"
    with pytest.raises(ParameterError, match="force"):
        choose(4e9, 25e3, 4000, force="disk")
    for bad in (0, -1.0, math.nan, None):
        with pytest.raises(ParameterError):
            choose(bad, 25e3, 4000)


def test_measurements(tmp_path):
    with open_cache(tmp_path) as c:
        assert c.measure_read() is None
        fill(c)
        assert c.measure_read() > 0 and c.measure_read(0, cold=True) > 0
        assert c.stats.disk_reads == 0  # not counted
    rate, mapped = measure_map_rate(lambda X: np.tanh(X), block(3), min_seconds=0.01)
    assert rate > 0 and same_bits(mapped, np.tanh(block(3)))
    assert choose(c.measure_read(), rate, WIDTH * 4)[0] in ("cache", "recompute")


def test_unwritable_cache_dir_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(fc.FeatureCacheError, match="cache_dir=DIR"):
        FeatureCache(tmp_path / "file" / "sub", material(), LAYOUT, WIDTH)


def test_a_manifest_cannot_point_the_cache_outside_its_directory(tmp_path, caplog):
    """A manifest whose checksum is made to fit cannot name a file outside the cache (issue 12:
    no file may make the program read or write outside the paths it was given)."""
    import zlib
    from streamrank.cache.feature_cache import canonical_json
    with open_cache(tmp_path) as c:
        fill(c)
    outside = tmp_path / "outside.bin"
    outside.write_bytes((c.dir / "block-00000.bin").read_bytes())
    mpath = c.dir / "manifest.json"
    m = json.loads(mpath.read_text())
    m.pop("checksum")
    m["blocks"]["0"]["file"] = "../outside.bin"
    m["checksum"] = zlib.crc32(canonical_json(m).encode())
    mpath.write_text(json.dumps(m))
    with caplog.at_level(logging.WARNING, "streamrank.cache.feature_cache"):
        with open_cache(tmp_path) as c:
            assert c.present == [] and c.get(0) is None
    assert "does not match the block layout" in caplog.text
    assert outside.exists()  # neither read as block 0 nor removed
