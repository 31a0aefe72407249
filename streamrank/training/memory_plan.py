"""How a memory budget is spent, for every training path: the block size that keeps a linear or
mapped run's peak RSS inside it and its in-memory tier, and the exact path's blocks of Q, its
in-memory tier of Q and the preconditioner's share.

The budget (``--memory-budget``) bounds the whole process: the interpreter and its libraries
(already resident when training starts), the per-row arrays the objective keeps (one active
set, 3 int32: the accepted point's or a trial point's, never both; and the label ranks), the
preconditioner's temporaries, and the two block buffers of the prefetching stream. Blocks get
what remains, at most ``BLOCK_SHARE_OF_BUDGET`` of the budget each; the block size never changes a
model (every sum runs in an order fixed by the data), only the number of reads.
"""

import logging

from streamrank.errors import ParameterError
from streamrank.io.budget import BUFFERS, HEADROOM, STREAM_SLACK, block_bytes, resident_bytes
from streamrank.io.query_stream import BLOCK_SHARE_OF_BUDGET
from streamrank.units import format_size

log = logging.getLogger("streamrank.training.memory_plan")

# per row: one active set (order, cut_pref, cut_less: int32 each; the objective drops the accepted
# point's before it makes a trial point's) and the label rank (int32); the smooth hinge adds its
# band's cut (int32) and the sorted scores (float64) to the active set
STATE_BYTES_PER_ROW = 3 * 4 + 4
SMOOTH_STATE_BYTES_PER_ROW = STATE_BYTES_PER_ROW + 4 + 8


def state_bytes_per_row(loss="squared_hinge"):
    return SMOOTH_STATE_BYTES_PER_ROW if loss == "smooth_hinge" else STATE_BYTES_PER_ROW
# share of the budget for mapped (or raw) float64 blocks kept in memory between passes
MEMORY_TIER_SHARE = 0.5


# share of the budget the mapped validation rows of a kernel map's C path may take (held once per
# gamma and scored by every point's weights; beyond it they are mapped again at every score)
VALID_MAP_SHARE = 0.1


# share of the budget the dense Hessian of a Newton solver may take (its m x m matrices and the
# float64 rows with their Hessian products while it is formed)
DENSE_HESSIAN_SHARE = 0.25


def dense_hessian_max(budget):
    """The largest m whose dense Hessian (3 m x m float64: H, its factor, a temporary) and its
    formation (2 x HESSIAN_ROWS x m float64) fit DENSE_HESSIAN_SHARE of the budget; Newton-Yuan
    uses CG directions beyond."""
    from streamrank.objectives.rank_objective import HESSIAN_ROWS
    room = budget * DENSE_HESSIAN_SHARE
    b = 16.0 * HESSIAN_ROWS  # 24 m^2 + b m <= room
    return max(0, int((-b + (b * b + 96.0 * room) ** 0.5) / 48.0))


def raw_block_bytes(budget, ds=None):
    """Bytes of a block of raw rows read once (normalisation statistics, the exact path's rows):
    BLOCK_SHARE_OF_BUDGET of the budget, less for a dataset in a store, whose known-parts cache
    holds one more copy of a block (io.budget.remote_copies): the stream's buffers and that copy
    then take what the two buffers take for a local file."""
    from streamrank.io.budget import BUFFERS, remote_copies
    return int(budget * BLOCK_SHARE_OF_BUDGET * BUFFERS / (BUFFERS + remote_copies(ds)))


def memory_tier_bytes(budget, resident=0, fixed=0):
    """Bytes of the in-memory tier of a linear or mapped run's block source: at most
    ``MEMORY_TIER_SHARE`` of the budget, and what the budget leaves beside ``resident`` bytes and
    the run's ``fixed`` ones (per-row state, temporaries); kept rows need no stream buffers."""
    return max(0, int(min(budget * MEMORY_TIER_SHARE, (budget - resident) / HEADROOM - fixed)))


# One stored block of Q: at most Q_BLOCK_BYTES, and at most 1/Q_BLOCKS_IN_BUDGET of the budget
# (three are buffered, so the buffers hold at most 3/64 of it; the block size never changes a
# result, only the number of reads)
Q_BLOCK_BYTES = 64 << 20
Q_BLOCKS_IN_BUDGET = 64
# what an exact run holds besides its planned arrays: LLVM's code pages that the first call of each
# kernel runs again (measured: 20 MB of libllvmlite back in the resident set between the drops of
# io.budget.drop_idle_library_pages) and the allocator's and threads' own (io.budget.STREAM_SLACK)
EXACT_SLACK = (24 << 20) + STREAM_SLACK
# a share of the budget the exact path's in-memory tier of Q leaves unplanned: the allocator's
# fragments and the passes' small temporaries, which grow with the run's scale (measured: generated
# mq2007, 42,158 rows, 2,000 landmarks, peaked 5 MB above a 2 GB budget planned to the byte)
EXACT_MARGIN = 0.01
# float64 vectors of length l alive at once (TRON's w, g, s, r, d, Hd; the objective's z, dz,
# gradient and trial copies; the pass's state arrays), with room to spare
VECTORS_PER_ROW = 40


def linear_plan(budget, n_rows, extra=0, given_block=None, resident=None, mapped_ratio=0.0, loss="squared_hinge",
                store_copies=0):
    """(bytes of a block, bytes of the in-memory tier) of a linear or mapped run over ``n_rows``
    rows; a ``given_block`` size is kept; ``mapped_ratio``: a feature map's output columns per
    input column; ``store_copies``: io.budget.remote_copies of the data. Logs the shares it chose."""
    resident = resident_bytes() if resident is None else resident
    per_row = state_bytes_per_row(loss)
    # a mapped block also has its float64 normalised copy (2 bytes per raw byte), the map's
    # float64 kernel values or projections (2 per output column) and its float32 output (1)
    per_byte = BUFFERS + store_copies + (2 + 3 * mapped_ratio if mapped_ratio else 0)
    size = int(given_block) if given_block else block_bytes(budget, n_rows, per_row=per_row,
                                                             per_block_byte=per_byte, extra=extra, resident=resident)
    tier = memory_tier_bytes(budget, resident, n_rows * per_row + extra)
    log.info("memory plan (budget %s): resident %s; per-row state %s; preconditioner temporaries %s; %d blocks of "
             "%s; rows kept in memory up to %s", format_size(budget), format_size(resident),
             format_size(n_rows * per_row), format_size(extra), BUFFERS, format_size(size),
             format_size(tier))
    return size, tier


def exact_kernel_plan(l, d, budget, block_bytes=None, landmarks=0, resident=None, loss="squared_hinge",
                      with_threads=False, extra=0, quiet=False):
    """(bytes of a stored block of Q, bytes of the in-memory tier) inside ``budget``, which bounds
    the whole process: what is resident already (the interpreter, libraries) counts. Logs the
    shares it chose. ``with_threads``: also return the threads that compute Q's tiles (all of the
    passes' threads when their tiles fit beside the rest, else one: the tiles' bits do not depend on
    it, kernels.parallel_tiles). ``extra``: bytes the caller holds beside them (the validation
    rows' kernel values, :func:`exact_valid_bytes`). ``quiet``: the plan without its log lines."""
    # the exact path's modules, imported here so that a linear run imports none of them (start-up)
    from streamrank.cache.kernel_cache import READ_BUFFERS
    from streamrank.io.budget import EXACT_MMAP_THRESHOLD, drop_idle_library_pages, load_kernel_runtime, tune_allocator
    tune_allocator(EXACT_MMAP_THRESHOLD)  # freed temporaries leave the resident set (io.budget)
    if resident is None:  # LLVM's pages, touched when numba was imported (io.budget.IDLE_LIBRARIES)
        load_kernel_runtime()
        drop_idle_library_pages()
    from streamrank.features.kernels import tile_rows, tile_threads

    def qblock_of(b):  # a stored block of Q grows with the budget (a fixed share of it)
        return int(block_bytes) if block_bytes else max(4 * l, min(Q_BLOCK_BYTES, b // Q_BLOCKS_IN_BUDGET))
    qblock = qblock_of(budget)
    # the tiles of float64 rows and kernel values being computed, one per thread computing them
    # (kernels.parallel_tiles), while the tier of Q fills
    tile = 8 * tile_rows(l + d) * (l + d)
    threads = tile_threads()
    chunk = threads * tile
    m = min(landmarks, l)
    precond = _precond_bytes(l, m)
    resident = resident_bytes() if resident is None else resident
    fixed = 8 * l * d + 8 * VECTORS_PER_ROW * l + chunk + precond + EXACT_SLACK + int(extra)
    fixed += 2 * (state_bytes_per_row(loss) - STATE_BYTES_PER_ROW) * l  # the band state of two points
    q_bytes = 4 * l * l
    margin = int(EXACT_MARGIN * budget)
    if resident + q_bytes + fixed + READ_BUFFERS * qblock + margin <= budget:
        if not quiet:
            _log_exact(budget, resident, fixed, precond, qblock, q_bytes, q_bytes)
        return (qblock, q_bytes, threads) if with_threads else (qblock, q_bytes)  # all of Q in memory
    if threads > 1 and resident + fixed + READ_BUFFERS * qblock > budget:
        threads, fixed, chunk = 1, fixed - chunk + tile, tile  # one tile at a time: slower, the same Q
    need = resident + fixed + READ_BUFFERS * qblock
    if budget <= resident and fixed <= max(budget, resident):
        # below the process itself: no plan can hold it (the linear path's rule, io.budget.block_bytes:
        # said, and the run goes on with Q on disk; tests use such budgets to put Q on disk)
        (log.debug if quiet else log.warning)(
            "memory budget %s is below what this process holds already (%s): peak RSS will exceed it; "
            "use memory_budget=%s", format_size(budget), format_size(resident), format_size(_round_up(need)))
        return (qblock, 0, 1) if with_threads else (qblock, 0)
    if need > budget:
        raise _exact_budget_error(budget, l, m, precond,
                                  lambda named: resident + fixed + READ_BUFFERS * qblock_of(named), resident, need)
    fixed += resident
    tier = max(0, budget - fixed - READ_BUFFERS * qblock - margin)
    if quiet:
        return (qblock, tier, threads) if with_threads else (qblock, tier)
    _log_exact(budget, resident, fixed, precond, qblock, tier, q_bytes)
    if threads == 1 and tile_threads() > 1:
        log.info("Q's tiles computed on one thread (two tiles of %s do not fit the budget beside the rest)",
                 format_size(tile))
    return (qblock, tier, threads) if with_threads else (qblock, tier)


def exact_valid_bytes(l, d, budget, valid, block_bytes=None, landmarks=0, loss="squared_hinge", resident=None):
    """Bytes of the validation rows' float32 K(x, X) that an exact path keeps for a gamma's C path
    (training.problem.MappedValidation), or 0 (each score computes them again): kept when they
    take at most VALID_MAP_SHARE of the budget and all of Q still fits in memory beside them,
    since reading Q from disk every pass costs more than the validation saves. The plan with them
    is made quietly (:func:`exact_kernel_plan` logs the one the run uses)."""
    from streamrank.training.problem import mapped_validation_bytes
    vb = mapped_validation_bytes(valid, l, 4)
    if not vb or vb > VALID_MAP_SHARE * budget:
        return 0
    try:
        _, tier = exact_kernel_plan(l, d, budget, block_bytes, landmarks, resident, loss=loss, extra=vb, quiet=True)
    except ParameterError:
        return 0
    return vb if tier >= 4 * l * l else 0


def _precond_bytes(l, m):
    """Bytes the Nystroem preconditioner of m landmarks holds over l rows while Q fills memory."""
    from streamrank.objectives.kernel_precond import a_chunk_bytes
    # float32 U, diag(R) and two D (the base's and the point's), five m x m float64 matrices (A,
    # U^T D^-1 U, R_A, B's factor and a temporary; the last point's are released first) and the
    # chunks of their products (kernel_precond); its float64 build-time factor (8 l m) is freed
    # before the tier of Q fills memory
    return (4 * l * m + 24 * l + 40 * m * m + a_chunk_bytes(l, m)) if m else 0


def _exact_budget_error(budget, l, m, precond, need_at, resident, at_budget):
    """What an exact run needs besides Q does not fit: the ParameterError said before any work,
    with the smallest budget that holds it (Q then read from disk every pass); the preconditioner
    named when it is what does not fit. ``need_at(b)``: the need at budget b, whose blocks of Q grow
    with b, so the budget named is the fixed point of need(b) <= b (3 blocks of b / 64 add under 5%
    of b: a few steps); ``at_budget``: the need at ``budget``."""
    from streamrank.cache.kernel_cache import READ_BUFFERS
    need = at_budget
    for _ in range(8):
        named = _round_up(need)
        need = need_at(named)
        if need <= named:
            break
    return ParameterError(f"memory_budget {format_size(budget)} is too small for exact kernel RankSVM on "
                          f"{l} rows: with {format_size(resident)} resident, the rows, solver vectors, "
                          f"preconditioner and {READ_BUFFERS} blocks of Q need {format_size(need)}; use "
                          f"memory_budget={format_size(_round_up(need))}"
                          + (f" (the preconditioner's {m} landmarks take {format_size(precond)}; "
                             f"use precondition=off to drop them)"
                             if precond and at_budget - precond <= budget else ""))


def _round_up(n, step=10 ** 7):
    """n rounded up to a multiple of 10 MB: a budget to pass."""
    return int(-(-n // step) * step)


def _log_exact(budget, resident, fixed, precond, qblock, tier, q_bytes):
    from streamrank.cache.kernel_cache import READ_BUFFERS
    log.info("memory plan (budget %s): resident %s; rows, solver vectors and preconditioner %s (preconditioner %s); "
             "%d blocks of Q of %s; Q in memory %s of %s", format_size(budget), format_size(resident),
             format_size(fixed), format_size(precond), READ_BUFFERS, format_size(qblock),
             format_size(min(tier, q_bytes)), format_size(q_bytes))
