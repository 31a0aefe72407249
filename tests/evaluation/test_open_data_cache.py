"""The text-to-dataset cache of ``open_data`` (train, eval and predict given text) is reused only for
the same bytes: an edit in place that keeps size and mtime (``cp -p``, ``rsync -t``) converts again."""

import os

import numpy as np

from streamrank.io.data_files import open_data

ROWS = "{0} qid:1 1:0.5 2:1\n1 qid:1 1:0.25 2:2\n2 qid:2 1:1 2:0\n"


def _labels(path, cache):
    with open_data(path, cache) as ds:
        return ds.read(0, ds.n_rows)[1].tolist()


def test_a_same_size_edit_with_mtime_set_back_is_converted_again(tmp_path):
    text, cache = tmp_path / "t.txt", tmp_path / "cache"
    text.write_text(ROWS.format(0))
    assert _labels(text, cache) == [0, 1, 2]
    st = text.stat()
    text.write_text(ROWS.format(2))  # the same size
    os.utime(text, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert text.stat().st_size == st.st_size and text.stat().st_mtime_ns == st.st_mtime_ns
    assert _labels(text, cache) == [2, 1, 2]


def test_an_unchanged_text_reuses_its_conversion(tmp_path):
    text, cache = tmp_path / "t.txt", tmp_path / "cache"
    text.write_text(ROWS.format(0))
    _labels(text, cache)
    made = sorted(cache.glob("*.h5"))
    assert len(made) == 1
    stamp = made[0].stat().st_mtime_ns
    assert np.array_equal(_labels(text, cache), [0, 1, 2])
    assert sorted(cache.glob("*.h5")) == made and made[0].stat().st_mtime_ns == stamp
