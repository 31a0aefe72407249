"""Numba kernels that parse LETOR / SVMlight text bytes into dense float32 rows.

Line grammar: ``label [qid:Q] idx:value ... [# comment]`` with spaces or tabs between tokens, CR
before LF tolerated, blank and comment-only lines skipped (they are not rows).

Numbers: a value must be ``float32(float(token))`` exactly (DESIGN.md). The kernel parses the
decimal mantissa into an integer m and a power of ten e; when m <= 2^53 and |e| <= 22 both m and
10^|e| are exact doubles, so the single product or quotient m * 10^e is the correctly rounded double
(Clinger's fast path) and the cast to float32 reproduces float32(float(token)). Every other token
(more than 16 significant digits, large exponents) is flagged "slow", left as NaN, and the caller
re-parses it with Python's ``float``, which rounds correctly. LETOR files (6 decimals) never take
the slow path.

The plain-Python twin of these kernels is the reference parser in ``tests/letor_oracle.py``.
"""

import numba
import numpy as np

from streamrank._native import numba_cache

# error codes, one per line (0 = fine); messages live in convert.py
E_LABEL = 1
E_NAN_INF = 2
E_MISSING_QID = 3
E_BAD_QID = 4
E_QID_WITH_QUERY_FILE = 5
E_TOKEN = 6
E_INDEX = 7
E_INDEX_ZERO = 8
E_DUPLICATE = 9
E_BEYOND = 10
E_VALUE = 11

# number parser results
_OK, _SLOW, _NAN, _INF_NAN = 0, 1, 2, 3

# exact powers of ten representable as doubles (10^22 < 2^53 * 2^22 is the last exact one)
_POW10 = np.array([10.0 ** k for k in range(23)])
_MAX_EXACT_MANTISSA = 2 ** 53
# significant digits accumulated into an int64 mantissa; beyond that the token is slow
_MAX_DIGITS = 18
_U1 = np.uint64(1)


@numba.njit(cache=True, nogil=True, inline="always")
def _is_ws(c):
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@numba.njit(cache=True, nogil=True)
def _parse_number(buf, s, e):
    """Parse buf[s:e] as a decimal number; return (status, value).

    status: _OK (value exact as float(token)), _SLOW (valid decimal, needs Python's float),
    _NAN (not a number), _INF_NAN (nan/inf spelled out).
    """
    i = s
    neg = False
    c = buf[i]
    if c == 43 or c == 45:  # '+' '-'
        neg = c == 45
        i += 1
        if i == e:
            return _NAN, 0.0
        c = buf[i]
    if c == 110 or c == 78 or c == 105 or c == 73:  # n N i I: nan, inf, infinity
        return _INF_NAN, 0.0
    m = 0
    nd = 0
    e10 = 0
    dropped = False
    i0 = i
    i, m, nd, e10, dropped = _digits(buf, i, e, m, nd, e10, dropped, 0)
    any_digit = i > i0
    if i < e and buf[i] == 46:  # '.'
        i += 1
        i0 = i
        i, m, nd, e10, dropped = _digits(buf, i, e, m, nd, e10, dropped, 1)
        any_digit = any_digit or i > i0
    if not any_digit:
        return _NAN, 0.0
    if i < e and (buf[i] == 101 or buf[i] == 69):  # 'e' 'E'
        i += 1
        eneg = False
        if i < e and (buf[i] == 43 or buf[i] == 45):
            eneg = buf[i] == 45
            i += 1
        if i == e:
            return _NAN, 0.0
        ex = 0
        while i < e and 48 <= buf[i] <= 57:
            if ex < 100000:
                ex = ex * 10 + (buf[i] - 48)
            i += 1
        e10 += -ex if eneg else ex
    if i != e:
        return _NAN, 0.0
    return _number_value(m, e10, dropped, neg)


@numba.njit(cache=True, nogil=True, inline="always")
def _digits(buf, i, e, m, nd, e10, dropped, frac):
    """Accumulate the digits from buf[i] (before e) into the mantissa m of nd significant digits
    (at most _MAX_DIGITS) and the power of ten e10: each digit kept after the point (``frac`` 1)
    lowers e10, each dropped before it (``frac`` 0) raises it; ``dropped``: a nonzero digit was
    dropped. Returns (i at the first non-digit, m, nd, e10, dropped)."""
    while i < e and 48 <= buf[i] <= 57:
        d = buf[i] - 48
        if nd < _MAX_DIGITS:
            m = m * 10 + d
            if m != 0:
                nd += 1
            e10 -= frac
        else:
            e10 += 1 - frac
            dropped = dropped or d != 0
        i += 1
    return i, m, nd, e10, dropped


@numba.njit(cache=True, nogil=True, inline="always")
def _number_value(m, e10, dropped, neg):
    """(status, value) of the decimal (-1)^neg m 10^e10 (``dropped``: nonzero digits beyond m's)."""
    if m == 0:
        return _OK, -0.0 if neg else 0.0
    if dropped or m > _MAX_EXACT_MANTISSA or e10 > 22 or e10 < -22:
        return _SLOW, 0.0
    # Clinger's fast path: one correctly rounded IEEE operation on two exact doubles
    v = float(m) * _POW10[e10] if e10 >= 0 else float(m) / _POW10[-e10]
    return _OK, -v if neg else v


@numba.njit(cache=True, nogil=True)
def _parse_uint(buf, s, e):
    """Digits only, at most 18 of them; -1 when buf[s:e] is not such a number."""
    if e <= s or e - s > _MAX_DIGITS:
        return -1
    v = 0
    for i in range(s, e):
        c = buf[i]
        if c < 48 or c > 57:
            return -1
        v = v * 10 + (c - 48)
    return v


@numba.njit(cache=True, nogil=True)
def data_lines(k0, k1, buf, line_start, line_end, is_data):
    """is_data[k] = line k has a non-blank character before any '#', for lines k0:k1."""
    for k in range(k0, k1):
        p = line_start[k]
        le = line_end[k]
        while p < le and _is_ws(buf[p]):
            p += 1
        is_data[k] = p < le and buf[p] != 35


@numba.njit(cache=True, nogil=True)
def _starts_with_qid(buf, p, q):
    return q - p >= 4 and buf[p] == 113 and buf[p + 1] == 105 and buf[p + 2] == 100 and buf[p + 3] == 58


@numba.njit(cache=True, nogil=True)
def _parse_line(k, buf, ls, le, row, base, width, fixed, want_qid, X, y, qid_int, qid_s, qid_e,
                qid_isint, com_s, com_e, err, err_s, err_e, slow, nnz, maxcol, marker):
    # One pass over the line: a token ends at white space, at the first '#' (the comment's start,
    # h) or at the line's end. A feature of the common form (index digits ':' [sign] digits
    # [. digits]) is read in that pass; any other token (the label, the qid, an exponent, a bad
    # character) is read again from its start by the general path below, which reports the
    # errors. Scanning loops stop at the line's '\n' (buf[le], the caller's guarantee) without a
    # bound check, and the fast path's positions are unsigned: numba indexes those without its
    # negative-index wraparound (three instructions a byte). One pass, not one for the comment
    # and one for each token's end, ':', index and value; one function on purpose, as splitting
    # it costs speed (docs/design.md, "The text parser's one function").
    h = le
    p = ls
    t = 0
    xrow = X[row]
    cnt = 0
    mc = -1
    while True:
        u = np.uint64(p)
        while _is_ws(buf[u]):  # stops at the line's '\n' at the latest
            u += _U1
        p = np.int64(u)
        if p >= le or buf[u] == 35:
            h = p
            break
        if t >= 2 or (t == 1 and not want_qid):
            # fast path: index digits (1 to 18), ':', [+-] digits [. digits] with at most 18 digits
            # in all, then a token end. No digit is dropped, so m and e10 are exactly what
            # _parse_number accumulates for the token, and the value is its value
            i = np.uint64(p)
            idx = 0
            while 48 <= buf[i] <= 57:
                idx = idx * 10 + (buf[i] - 48)
                i += _U1
            ni = np.int64(i) - p
            if 0 < ni <= _MAX_DIGITS and buf[i] == 58:
                i += _U1
                neg = buf[i] == 45
                if neg or buf[i] == 43:
                    i += _U1
                m = 0
                d0 = i
                while 48 <= buf[i] <= 57:
                    m = m * 10 + (buf[i] - 48)
                    i += _U1
                nd = np.int64(i - d0)
                e10 = 0
                if buf[i] == 46:
                    i += _U1
                    f0 = i
                    while 48 <= buf[i] <= 57:
                        m = m * 10 + (buf[i] - 48)
                        i += _U1
                    e10 = -np.int64(i - f0)
                    nd -= e10
                c = buf[i]
                if 0 < nd <= _MAX_DIGITS and (_is_ws(c) or c == 35 or c == 10):
                    q = np.int64(i)
                    col = idx - base
                    if col < 0:
                        err[k], err_s[k], err_e[k] = E_INDEX_ZERO, p, q
                        return
                    if fixed and col >= width:
                        err[k], err_s[k], err_e[k] = E_BEYOND, p, q
                        return
                    if col < width:
                        uc = np.uint64(col)
                        # a column above every earlier one of the line is new to it
                        if col <= mc and marker[uc] == k + 1:
                            err[k], err_s[k], err_e[k] = E_DUPLICATE, p, q
                            return
                        marker[uc] = k + 1
                        if m > _MAX_EXACT_MANTISSA:
                            slow[k] = 1
                            v = np.nan
                        else:
                            # _number_value without its branches (mispredicted on LETOR's mix of
                            # zeros and integers: 11.1 -> 9.5 ns a feature): e10 is -(the fraction's
                            # digits), -18..0, so one exact division, and m = 0 gives 0.0 too
                            v = float(m) / _POW10[-e10]
                            if neg:
                                v = -v
                        xrow[uc] = v
                    if col > mc:
                        mc = col
                    cnt += 1
                    t += 1
                    p = q
                    continue
        # the general path: the token's end first, then its parts
        q = p
        while q < le and not _is_ws(buf[q]) and buf[q] != 35:
            q += 1
        if t == 0:
            st, v = _parse_number(buf, p, q)
            if st == _NAN or st == _INF_NAN:
                err[k], err_s[k], err_e[k] = (E_LABEL if st == _NAN else E_NAN_INF), p, q
                return
            if st == _SLOW:
                slow[k] = 1
                v = np.nan
            y[row] = v
        elif t == 1 and want_qid:
            if not _starts_with_qid(buf, p, q):
                err[k], err_s[k], err_e[k] = E_MISSING_QID, p, q
                return
            if q == p + 4:
                err[k], err_s[k], err_e[k] = E_BAD_QID, p, q
                return
            qid_s[k], qid_e[k] = p + 4, q
            neg = buf[p + 4] == 45
            qv = _parse_uint(buf, p + 5 if neg else p + 4, q)
            if qv >= 0:
                qid_int[k] = -qv if neg else qv
                qid_isint[k] = 1
            else:
                qid_isint[k] = 0
        else:
            if t == 1 and _starts_with_qid(buf, p, q):
                err[k], err_s[k], err_e[k] = E_QID_WITH_QUERY_FILE, p, q
                return
            c = p
            while c < q and buf[c] != 58:
                c += 1
            if c == q:
                err[k], err_s[k], err_e[k] = E_TOKEN, p, q
                return
            idx = _parse_uint(buf, p, c)
            if idx < 0:
                err[k], err_s[k], err_e[k] = E_INDEX, p, q
                return
            col = idx - base
            if col < 0:
                err[k], err_s[k], err_e[k] = E_INDEX_ZERO, p, q
                return
            if fixed and col >= width:
                err[k], err_s[k], err_e[k] = E_BEYOND, p, q
                return
            if c + 1 == q:
                err[k], err_s[k], err_e[k] = E_VALUE, p, q
                return
            st, v = _parse_number(buf, c + 1, q)
            if st == _NAN:
                err[k], err_s[k], err_e[k] = E_VALUE, p, q
                return
            if st == _INF_NAN:
                err[k], err_s[k], err_e[k] = E_NAN_INF, p, q
                return
            if col < width:
                if marker[col] == k + 1:
                    err[k], err_s[k], err_e[k] = E_DUPLICATE, p, q
                    return
                marker[col] = k + 1
                if st == _SLOW:
                    slow[k] = 1
                    v = np.nan
                X[row, col] = v
            if col > mc:
                mc = col
            cnt += 1
        t += 1
        p = q
    if want_qid and t < 2:
        err[k], err_s[k], err_e[k] = E_MISSING_QID, ls, h
        return
    # the comment: everything after the first '#', without surrounding white space
    if h < le:
        a, b = h + 1, le
        while a < b and _is_ws(buf[a]):
            a += 1
        while b > a and _is_ws(buf[b - 1]):
            b -= 1
        com_s[k], com_e[k] = a, b
    else:
        com_s[k], com_e[k] = le, le
    nnz[k] = cnt
    maxcol[k] = mc


@numba.njit(cache=True, nogil=True)
def parse_lines(k0, k1, buf, line_start, line_end, row_of_line, base, width, fixed, want_qid, X, y,
                qid_int, qid_s, qid_e, qid_isint, com_s, com_e, err, err_s, err_e, slow, nnz, maxcol):
    """Parse the data lines k0:k1 of ``buf`` into row ``row_of_line[k]`` of X and y (the caller
    runs line ranges side by side, :mod:`streamrank._native.parallel`). ``line_end[k]`` is the
    position of line k's b'\\n' (the kernels read up to it without a bound check).

    Columns at or beyond ``width`` are not stored when ``fixed`` is False: ``maxcol`` tells the
    caller to widen X and parse again. One duplicate-index marker array per call (marker[col] =
    line + 1 of the last line that set col).
    """
    marker = np.zeros(max(width, 1), np.int64)
    for k in range(k0, k1):
        row = row_of_line[k]
        if row < 0:
            continue
        _parse_line(k, buf, line_start[k], line_end[k], row, base, width, fixed, want_qid, X, y,
                    qid_int, qid_s, qid_e, qid_isint, com_s, com_e, err, err_s, err_e, slow,
                    nnz, maxcol, marker)


@numba.njit(cache=True, nogil=True)
def gather_qid_bytes(r0, r1, buf, qs, qe, out):
    """out[r, :] = the qid text of row r, zero padded (for non-integer query ids), rows r0:r1."""
    for r in range(r0, r1):
        for t in range(qe[r] - qs[r]):
            out[r, t] = buf[qs[r] + t]


# 10^1 .. 10^18: an int64's decimal digits are 1 + the number of these it reaches
_INT_POW10 = 10 ** np.arange(1, 19, dtype=np.int64)


def canonical_ints(v, lengths):
    """Whether every id's text is the integer's own decimal form (no sign, no leading zero):
    only then are ids kept as integers. Otherwise they are kept as their text (``007``, ``+7``),
    in every chunk alike: a chunk of integer ids must not turn ``007`` into ``7`` when a later
    chunk's ``abc`` makes every id text (the query would split in two by the chunk size)."""
    digits = 1 + np.searchsorted(_INT_POW10, np.abs(v), side="right")
    return bool(np.array_equal(lengths, digits + (v < 0)))


numba_cache.adopt(globals())  # last: every kernel above compiles and caches as streamrank's
