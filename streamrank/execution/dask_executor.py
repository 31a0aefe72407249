"""Passes on a dask.distributed cluster (DESIGN.md, "Data flow"; docs/design.md, "Beyond one machine").

The same :class:`~streamrank.execution.executor.Pass` objects as in this process, run where the
rows are:

- **Partitions** (:mod:`streamrank.execution.partitions`, fixed by the query index) are assigned to
  workers once, in contiguous runs, and every task of a partition is pinned to its worker
  (``client.submit(..., workers=[home], allow_other_workers=False)``). A worker builds its
  partitions' sources from their recipes (``source.spec``: the dataset by path, the normaliser,
  the map), reads its rows itself, and keeps them (in memory within the budget, in its feature
  cache, or re-read) between passes: the resident-state pattern (:mod:`streamrank.execution.remote`).
- **A pass** ships the pass object (w or s, the costs) to each partition and its carry back; the
  carries are merged in partition order, so the result is the local executor's to the bit. Block
  outputs that later passes take back (active sets, scores) stay on the worker under a handle;
  outputs a caller wants (scores, rows) come back. Passes that cannot be split (``one_partition``)
  run partition after partition with the carry handed on.
- **Faults**: while it waits (for a task, and for a finished task's result to come back), the
  executor checks that the partitions' workers are alive. A lost worker's partitions move to the
  live workers with the fewest; the new home rebuilds the source from its recipe, recomputes kept
  outputs from their lineage (the pass that made them), and the pass continues to the same bits.
  When every worker alive at the executor's last look is gone at once (an out-of-memory kill of
  all of them, a lost node), or the scheduler is, the run ends with :class:`ClusterLost` at the
  next look (every :data:`POLL_SECONDS` while a pass waits; one scheduler call, at most
  :data:`SCHEDULER_TIMEOUT`), whatever workers joined meanwhile (a nanny restarting them holds
  none of the lost state). Every call to the cluster is bounded so, and :func:`stop_cluster`
  bounds the teardown. A checkpoint, where the caller wrote one, is untouched: that is the
  caller's to say (``ClusterLost.cause`` is the loss alone).

Bytes shipped are the exact sizes of the messages this module pickles (both ways); arrays sent once
per worker count once.
"""

import functools
import itertools
import logging
import os
import threading
import time
import uuid
import weakref

import numpy as np

from streamrank.errors import FormatError, StreamrankError
from streamrank.execution import remote
from streamrank.execution.executor import Executor, block_partition, run_blocks
from streamrank.execution.partitions import check_partition_rows

log = logging.getLogger("streamrank.execution.dask")

# How often a waiting pass checks that its partitions' workers are alive (seconds).
POLL_SECONDS = 0.5
# Seconds the client tries to reach a scheduler (at the start, and again after losing it) before the
# run ends with ClusterLost (dask's default is 30).
SCHEDULER_TIMEOUT = 10
# Seconds a joined cluster may take to have its first worker (workers often start after the scheduler).
WORKER_WAIT = 120
# Seconds one broadcast to the workers (dropping released state) or one step of the teardown may take
# (a worker that died mid-call is otherwise waited for until dask's connect timeout, 30 s).
CALL_SECONDS = 5
# Times one partition's task may be resent (lost workers, state a worker had to drop) before the
# pass gives up: each resend follows a change of the cluster, not a timer.
MAX_RESENDS = 8


class ClusterLost(StreamrankError):
    """The scheduler is gone, or every worker at once (:meth:`DaskExecutor._alive`), or a local
    cluster did not start.

    ``cause`` is the loss alone, one sentence without advice (the command line adds what to do,
    naming a checkpoint only where one exists); the message is the cause and the library's advice,
    which promises no checkpoint either."""

    ADVICE = ("rerun on a cluster with live workers (workers=N or scheduler=ADDRESS); a run given a "
              "checkpoint directory continues from its last finished iteration with resume=True")

    def __init__(self, cause):
        super().__init__(f"{cause}. To continue: {self.ADVICE}")
        self.cause = cause


# -- on the worker -------------------------------------------------------------------------------

_RUNS = {}
_RUNS_LOCK = threading.Lock()


def _resident(session):
    with _RUNS_LOCK:
        r = _RUNS.get(session)
        if r is None:
            r = _RUNS[session] = remote.Resident()
        return r


def _worker_address():
    from distributed import get_worker
    try:
        return get_worker().address
    except ValueError:
        return None


def _build(r, sid, part, spec_msg, bounds):
    """Partition ``part`` of source ``sid`` on this worker, made from its recipe."""
    if spec_msg is None:
        raise remote.Missing("source", [(sid, part)])
    factory, kwargs = remote.loads(spec_msg, r.arrays)
    kwargs = dict(kwargs, queries=(int(bounds[part]), int(bounds[part + 1])))
    if getattr(factory, "accepts_buffer_pool", False):  # one set of block buffers for every partition here
        kwargs["buffer_pool"] = r.pool
    if "memory_bytes" in kwargs:
        # this worker's share for the source's rows: what its earlier partitions left
        kwargs["memory_bytes"] = max(0, int(kwargs["memory_bytes"]) - r.data_bytes.get(sid, 0))
    src = factory(**kwargs)
    used = getattr(src, "memory_nbytes", getattr(src, "memory_bytes", 0))  # a kernel cache's tier: what it holds
    r.data_bytes[sid] = r.data_bytes.get(sid, 0) + int(used or 0)
    return src


def _task(*args):
    """One pass of one partition on this worker (:func:`_pass_task`); what the worker lacks comes
    back as ``("missing", what, keys)`` for the executor to send or remake (not an error: no
    traceback in the worker's log)."""
    try:
        return _pass_task(*args)
    except remote.Missing as e:
        return ("missing", e.what, e.keys)


def _pass_task(session, home, sid, part, spec_msg, bounds, pass_msg, kept, out_id, carry_msg, inline):
    """``kept``: per kept argument, ``("h", id)`` (outputs held here) or ``("v", message)`` (the
    partition's outputs, sent). Returns ``("done", message)``, the message the pickled
    ``(carry, outputs or None, stats)``."""
    if home is not None and _worker_address() not in (None, home):
        raise remote.Missing("misplaced", [home])
    r = _resident(session)
    if inline is not None:
        r.arrays.update(remote.loads(inline, {}))
    src = r.sources.get((sid, part))
    if src is None:
        src = r.sources[(sid, part)] = _build(r, sid, part, spec_msg, bounds)
    p = remote.loads(pass_msg, r.arrays)
    args = []
    for kind, ref in kept:
        if kind == "h":
            out = r.outputs.get((ref, part))
            if out is None:
                raise remote.Missing("outputs", [ref])
            args.append(out)
        else:
            args.append(remote.loads(ref, r.arrays))
    carry = None if carry_msg is None else remote.loads(carry_msg, r.arrays)
    t0 = time.perf_counter()
    read0 = getattr(src, "read_seconds", 0.0)
    rows0 = getattr(src, "rows_read", 0)
    with r.lock:  # partitions here share block buffers: one at a time (a worker may run several tasks)
        carry, outputs, blocks = run_blocks(p, src, args, carry=carry)
    stats = {"blocks": blocks, "seconds": time.perf_counter() - t0,
             "read_seconds": getattr(src, "read_seconds", 0.0) - read0,
             "rows_read": getattr(src, "rows_read", 0) - rows0,
             "worker": _worker_address(), "pid": os.getpid()}
    for name in ("in_memory", "memory_bytes", "mode", "reason"):  # what the driver's copy reports
        v = getattr(src, name, None)
        stats[name] = v if isinstance(v, (bool, int, float, str)) else None
    stats["kept"] = out_id is not None and any(o is not None for o in outputs)
    if stats["kept"]:
        r.outputs[(out_id, part)] = outputs
    msg, _ = remote.dumps((carry, outputs if p.returns else None, stats), resident=False)  # results travel whole
    return ("done", msg)


@functools.cache
def _run_takes_on_error():
    import inspect

    from distributed import Client
    return "on_error" in inspect.signature(Client.run).parameters


def _drop(session, sources, handles, dask_worker=None):
    r = _RUNS.get(session)
    if r is not None:
        r.drop(sources, handles)


def _forget(session, dask_worker=None):
    with _RUNS_LOCK:
        _RUNS.pop(session, None)


# -- on the client -------------------------------------------------------------------------------


class _Outputs:
    """Kept outputs of one pass, held by the workers (per partition), with their lineage: the
    pass message and the kept outputs it read, to remake them on a new worker."""

    def __init__(self, executor, hid, pass_msg, pass_arrays, kept):
        self.hid, self.pass_msg, self.pass_arrays, self.kept = hid, pass_msg, pass_arrays, kept
        weakref.finalize(self, executor._release_handle, hid)


class _SourceInfo:
    def __init__(self, sid, spec_msg, spec_arrays, bounds, block_part):
        self.sid, self.spec_msg, self.spec_arrays = sid, spec_msg, spec_arrays
        self.bounds, self.block_part = bounds, block_part


class DaskExecutor(Executor):
    """Runs passes on a dask.distributed ``Client``'s workers (see the module docstring).

    Parameters
    ----------
    client : distributed.Client
    partition_rows : int, optional
        Rows of one partition (:data:`~streamrank.execution.partitions.PARTITION_ROWS`); the
        same value gives the same model here and in this process.
    """

    name = "dask"
    remote = True

    def __init__(self, client, *, partition_rows=None):
        self.client = client
        quiet_client_loop(client)
        self.partition_rows = check_partition_rows(partition_rows)
        self.session = uuid.uuid4().hex
        self._ids = itertools.count(1)
        self._sources = weakref.WeakKeyDictionary()  # driver-side source object -> _SourceInfo
        self._home = {}         # (sid, part) -> worker address
        self._sent_arrays = {}  # worker -> digests sent
        self._built = {}        # worker -> (sid, part) built there
        self._dead_sources, self._dead_handles = [], []
        self._lock = threading.Lock()
        self.passes = 0
        self.tasks = 0
        self.bytes_out = 0
        self.bytes_back = 0
        self.resent = 0
        self.workers_lost = set()
        self._seen = set(self._workers())  # the workers a loss of every one is counted against
        self.pass_log = []  # (pass class name, partitions, bytes shipped both ways, seconds) of every pass

    # -- bookkeeping -----------------------------------------------------------------------------
    def describe(self):
        return {"executor": "dask", "scheduler": self.client.scheduler.address, "workers": len(self._workers()),
                "partition_rows": self.partition_rows, "passes": self.passes, "tasks": self.tasks,
                "bytes_shipped": self.bytes_out + self.bytes_back, "bytes_out": self.bytes_out,
                "bytes_back": self.bytes_back,
                "bytes_per_pass": (self.bytes_out + self.bytes_back) / max(self.passes, 1),
                "resent_tasks": self.resent, "workers_lost": len(self.workers_lost)}

    def _release_handle(self, hid):
        with self._lock:
            self._dead_handles.append(hid)

    def _release_source(self, sid):
        with self._lock:
            self._dead_sources.append(sid)

    def _flush_releases(self):
        with self._lock:
            sources, handles = self._dead_sources, self._dead_handles
            self._dead_sources, self._dead_handles = [], []
        if sources or handles:
            # a worker that died holds nothing any more: its failure to drop is no failure (a
            # lost scheduler still raises); "ignore" needs a Client.run that takes on_error
            quiet = {"on_error": "ignore"} if _run_takes_on_error() else {}
            self._call(self._broadcast, _drop, self.session, sources, handles, **quiet)
            for sid in sources:
                for key in [k for k in self._home if k[0] == sid]:
                    del self._home[key]
                for built in self._built.values():
                    built.difference_update({k for k in built if k[0] == sid})

    def close(self):
        """Drop this executor's state on the workers (the cluster stays); bounded, as every call."""
        try:
            self._broadcast(_forget, self.session)
        except Exception:  # a lost cluster keeps nothing anyway
            pass

    def _broadcast(self, fn, *args, **kwargs):
        """``client.run`` within :data:`CALL_SECONDS` (``callback_timeout`` is taken by the client's
        ``sync``, not passed to ``fn``); raises TimeoutError beyond."""
        return self.client.run(fn, *args, callback_timeout=CALL_SECONDS, **kwargs)

    def check_datasets(self, datasets, probe):
        """Before the first pass: every live worker can open each dataset named by URL (its
        protocol's package, access to the store, the same content: ``probe(url, options,
        fingerprint)`` run on each says why not, or None), or FormatError naming the first worker
        that cannot and why. A dataset on a local path is opened at its first task (a shared file
        system is checked by its fingerprint there)."""
        for ds in datasets:
            if getattr(ds, "_remote", None) is None:
                continue
            got = self._call(self._broadcast, probe, str(ds.path), ds._options, ds.fingerprint)
            bad = sorted((w, why) for w, why in got.items() if why)
            if bad:
                w, why = bad[0]
                raise FormatError(f"{ds.name}: the dask worker {w} cannot read it ({why}); give every worker the "
                                  f"protocol's package and access to the store (credentials by its environment, or "
                                  f"storage_options){f'; {len(bad) - 1} more workers cannot' if len(bad) > 1 else ''}")

    def _call(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (OSError, TimeoutError) as e:
            raise ClusterLost(self._lost_message(e)) from None

    def _lost_message(self, e):
        why = str(e).splitlines()[0] if str(e) else "no answer"
        return f"the dask scheduler at {self.client.scheduler.address} is gone ({type(e).__name__}: {why})"

    def _workers_lost(self, gone):
        self.workers_lost.update(gone)
        return ClusterLost(f"every worker of the dask cluster at {self.client.scheduler.address} was lost at once "
                           f"({', '.join(sorted(gone))})")

    def _workers(self):
        return sorted(self._call(self.client.nthreads, callback_timeout=SCHEDULER_TIMEOUT))

    def _alive(self):
        """The live workers (sorted). Raises :class:`ClusterLost` when there are none, or when none of
        the workers alive at the last look survives: every worker lost at once, whatever joined
        meanwhile (a nanny's restarts hold none of the rows read and outputs kept, and a cluster
        that lost all its workers together, out of memory say, would most likely do so again).
        Looks come at least every :data:`POLL_SECONDS` while a pass waits."""
        alive = self._workers()
        if self._seen and not self._seen.intersection(alive):
            raise self._workers_lost(self._seen)
        if not alive:
            raise ClusterLost(f"the dask cluster at {self.client.scheduler.address} has no workers")
        self._seen = set(alive)
        return alive

    # -- sources and partitions ------------------------------------------------------------------
    def _info(self, source):
        info = self._sources.get(source)
        if info is not None:
            return info
        spec = getattr(source, "spec", None)
        stream = getattr(source, "stream", source)
        bounds = getattr(stream, "partitions", None)
        if spec is None or bounds is None:
            raise TypeError(f"{type(source).__name__} cannot run on a dask cluster: it has no recipe (spec) "
                            f"and partitions for the workers to make their parts of it")
        sid = next(self._ids)
        msg, arrays = remote.dumps(spec)
        info = _SourceInfo(sid, msg, arrays, np.asarray(bounds), np.asarray(block_partition(source)))
        self._sources[source] = info
        weakref.finalize(source, self._release_source, sid)
        return info

    def _homes(self, info, alive):
        """The worker of each partition of ``info``: assigned once, in contiguous runs over the
        live workers; a partition whose worker is gone moves to the live worker with the fewest."""
        n_parts = len(info.bounds) - 1
        homes = []
        load = {w: 0 for w in alive}
        for w in self._home.values():
            if w in load:
                load[w] += 1
        for part in range(n_parts):
            key = (info.sid, part)
            w = self._home.get(key)
            if w is None or w not in load:
                if w is not None:
                    self.workers_lost.add(w)
                    log.warning("worker %s is gone: partition %d of source %d moves", w, part, info.sid)
                if w is None and not any(k[0] == info.sid for k in self._home):
                    w = alive[part * len(alive) // n_parts]
                else:
                    w = min(alive, key=lambda a: (load[a], a))
                self._home[key] = w
                load[w] += 1
            homes.append(w)
        return homes

    # -- messages ---------------------------------------------------------------------------------
    def _inline(self, worker, *stashes, resend=False):
        sent = self._sent_arrays.setdefault(worker, set())
        out = {}
        for stash in stashes:
            for key, a in stash.items():
                if resend or key not in sent:
                    out[key] = a
        sent.update(out)
        return out

    def _submit(self, worker, info, part, pass_msg, pass_arrays, kept, out_id, carry=None, resend=False):
        built = self._built.setdefault(worker, set())
        key = (info.sid, part)
        spec_msg = None if (key in built and not resend) else info.spec_msg
        kept_refs, stashes = [], [pass_arrays]
        if spec_msg is not None:
            stashes.append(info.spec_arrays)
        for x in kept:
            if isinstance(x, _Outputs):
                kept_refs.append(("h", x.hid))
            else:  # outputs held here: this partition's share goes with the task
                mine = [x[k] for k in np.flatnonzero(info.block_part == part)]
                msg, arrays = remote.dumps(mine)
                kept_refs.append(("v", msg))
                stashes.append(arrays)
                self.bytes_out += len(msg)
        carry_msg = None
        if carry is not None:
            carry_msg, _ = remote.dumps(carry, resident=False)  # partial sums travel whole
            self.bytes_out += len(carry_msg)
        inline = self._inline(worker, *stashes, resend=resend)
        inline = remote.dumps(inline, resident=False)[0] if inline else None  # our pickle: aligned arrays
        self.bytes_out += len(pass_msg) + (len(spec_msg) if spec_msg is not None else 0) + len(inline or b"")
        built.add(key)
        self.tasks += 1
        return self._call(self.client.submit, _task, self.session, worker, info.sid, part, spec_msg, info.bounds,
                          pass_msg, kept_refs, out_id, carry_msg, inline, workers=[worker],
                          allow_other_workers=False, pure=False, key=f"streamrank-pass-{uuid.uuid4().hex}")

    def _result(self, fut, home):
        """The task's (carry, outputs, stats); raises :class:`~streamrank.execution.remote.Missing`,
        or :class:`_Gone` when ``home``, which holds the result, dies before it has come back (dask
        would wait for a recompute that its pinning forbids: for ever)."""
        import asyncio
        fetch = asyncio.run_coroutine_threadsafe(self.client.gather([fut], asynchronous=True),
                                                 self.client.loop.asyncio_loop)
        while True:
            try:
                res = fetch.result(timeout=POLL_SECONDS)[0]
                break
            except TimeoutError:
                if fut.status == "finished" and home in self._alive():
                    continue  # a large result still on its way
            except Exception:  # noqa: BLE001 - the fetch failed: the future says why below
                if fut.status == "finished":
                    raise
            fut.cancel()  # the fetch waiting on it then ends (it is not cancelled half-way: no orphan task)
            try:
                fetch.result(timeout=POLL_SECONDS)
            except BaseException:  # noqa: B036 - it ends as cancelled; nothing of it is wanted
                fetch.cancel()
            raise _Gone(home)
        if res[0] == "missing":
            raise remote.Missing(res[1], res[2])
        self.bytes_back += len(res[1])
        return remote.loads(res[1], {})

    # -- running ----------------------------------------------------------------------------------
    def run(self, p, source, *, kept=(), collect=None):
        import asyncio

        from distributed.client import FutureCancelledError, FuturesCancelledError
        try:
            return self._run(p, source, kept, collect)
        except (OSError, asyncio.CancelledError, FutureCancelledError, FuturesCancelledError) as e:
            # the client lost its scheduler mid-pass (dask cancels every future then)
            raise ClusterLost(self._lost_message(e)) from None

    def _run(self, p, source, kept, collect):
        self._flush_releases()
        info = self._info(source)
        shipped = p
        if p.local_only:  # the caller's callbacks stay here
            import copy
            shipped = copy.copy(p)
            for name in p.local_only:
                setattr(shipped, name, None)
        pass_msg, pass_arrays = remote.dumps(shipped)
        out_id = None if p.returns else next(self._ids)
        before = self.bytes_out + self.bytes_back
        t0 = time.perf_counter()
        parts = self._parts(p, info)
        if p.one_partition:
            carry, outs, stats = self._chain(p, info, parts, pass_msg, pass_arrays, kept, out_id)
        else:
            carry, outs, stats = self._fan(p, info, parts, pass_msg, pass_arrays, kept, out_id)
        self.passes += 1
        self.pass_log.append((type(p).__name__, len(parts), self.bytes_out + self.bytes_back - before,
                              time.perf_counter() - t0))
        self._account(p, source, stats)
        kept_any = out_id is not None and any(s.get("kept") for s in stats)
        outputs = _Outputs(self, out_id, pass_msg, pass_arrays, kept) if kept_any else None
        if p.returns:
            flat = [o for part_outs in outs for o in part_outs]
            if collect is not None:
                for k, o in enumerate(flat):
                    collect(k, o)
                return carry, None
            return carry, flat
        return carry, outputs

    def _parts(self, p, info):
        if p.reads == "head":  # the first blocks: the first partition (see RankObjective.preconditioner)
            return [0]
        return list(range(len(info.bounds) - 1))

    def _fan(self, p, info, parts, pass_msg, pass_arrays, kept, out_id):
        """Every partition at once; carries merged in partition order."""
        results = self._gather(info, parts, lambda w, part, resend: self._submit(
            w, info, part, pass_msg, pass_arrays, kept, out_id, resend=resend), kept)
        total = None
        for part in parts:
            c = results[part][0]
            total = c if total is None else p.merge(total, c)
        if total is None:
            total = p.start()
        return total, [results[part][1] or [] for part in parts], [results[part][2] for part in parts]

    def _chain(self, p, info, parts, pass_msg, pass_arrays, kept, out_id):
        """A pass that cannot be split: partition after partition, the carry handed on."""
        carry, outs, stats = None, [], []  # the first partition starts the carry where it runs
        for part in parts:
            if carry is not None and p.done(carry):
                break
            # the carry bound now: _gather calls (and may resubmit) within this iteration only
            res = self._gather(info, [part], lambda w, pt, resend, c=carry: self._submit(
                w, info, pt, pass_msg, pass_arrays, kept, out_id, carry=c, resend=resend), kept)
            carry, o, s = res[part]
            outs.append(o or [])
            stats.append(s)
            p.reached(carry, int(info.bounds[part + 1]))
        return (p.start() if carry is None else carry), outs, stats

    def _gather(self, info, parts, submit, kept):
        """Submit ``parts`` to their homes and wait, resubmitting what a lost worker or a
        worker's missing state needs; returns {part: (carry, outputs, stats)}."""
        from distributed import wait
        homes = self._homes(info, self._alive())
        futs = {part: (homes[part], submit(homes[part], part, False)) for part in parts}
        resends = dict.fromkeys(parts, 0)
        results = {}

        def resend(part, why):
            resends[part] += 1
            if resends[part] > MAX_RESENDS:
                raise ClusterLost(f"partition {part} could not be run after {MAX_RESENDS} attempts (last: {why}); "
                                  f"the cluster keeps losing workers")
            self.resent += 1
            w = self._homes(info, self._alive())[part]
            held = [x.hid for x in kept if isinstance(x, _Outputs)] if why == "lost" else \
                (list(why[1]) if why[0] == "outputs" else [])
            if held:
                self._remake(info, part, held, kept)
            futs[part] = (w, submit(w, part, True))

        # a partition's error (bad data, say) is raised once every partition before it has finished:
        # the first partition's error in data order, whatever worker failed first, as a local run
        order = {part: k for k, part in enumerate(parts)}
        errors = {}
        while futs:
            first = min(errors, key=order.get, default=None)
            if first is not None and all(order[p] > order[first] for p in futs):
                for _, f in futs.values():
                    f.cancel()
                raise errors[first]
            try:
                wait([f for _, f in futs.values()], timeout=POLL_SECONDS, return_when="FIRST_COMPLETED")
                timed_out = False
            except TimeoutError:
                timed_out = True
            except OSError as e:
                raise ClusterLost(self._lost_message(e)) from None
            gone = set()
            for part, (w, f) in list(futs.items()):
                if f.status == "error":
                    errors[part] = f.exception()
                    del futs[part]
                    continue
                if f.status == "cancelled":  # not by us (we forget a future before cancelling it)
                    raise ClusterLost(self._lost_message(RuntimeError("the scheduler cancelled the pass")))
                if f.status != "finished":
                    continue
                try:
                    results[part] = self._result(f, w)
                except remote.Missing as e:
                    del futs[part]
                    resend(part, (e.what, e.keys))
                except _Gone:
                    gone.add(part)  # moved below, with the other partitions of the lost worker
                else:
                    del futs[part]
            if futs and (timed_out or gone):  # a lost worker's tasks never finish: move them
                alive = set(self._alive())
                for part, (w, f) in list(futs.items()):
                    if w not in alive or part in gone:  # gone with its worker, or its result lost
                        f.cancel()
                        if w not in alive:
                            self.workers_lost.add(w)
                        self._sent_arrays.pop(w, None)
                        self._built.pop(w, None)
                        del futs[part]
                        resend(part, "lost")
        if errors:
            raise errors[min(errors, key=order.get)]
        return results

    def _remake(self, info, part, hids, kept):
        """Kept outputs ``hids`` of ``part`` on its (new) home again, from their lineage."""
        for h in kept:
            if isinstance(h, _Outputs) and h.hid in hids:
                log.info("partition %d: remaking the outputs of an earlier pass on its new worker", part)
                self._gather(info, [part], lambda w, pt, again, h=h: self._submit(
                    w, info, pt, h.pass_msg, h.pass_arrays, h.kept, h.hid, resend=True), h.kept)

    def _account(self, p, source, stats):
        """The driver-side source's counters, as a local pass would leave them."""
        if p.reads == "rows" and hasattr(source, "passes"):
            source.passes += 1
        if hasattr(source, "rows_read"):
            source.rows_read += sum(s["rows_read"] for s in stats)
        if hasattr(source, "read_seconds"):
            source.read_seconds += sum(s["read_seconds"] for s in stats)
        if stats and p.reads == "rows":
            vals = [s["in_memory"] for s in stats if s["in_memory"] is not None]
            if vals and hasattr(source, "in_memory"):
                source.in_memory = all(vals)
            mem = [s["memory_bytes"] for s in stats if s["memory_bytes"] is not None]
            if mem and hasattr(source, "memory_bytes"):
                source.memory_bytes = sum(mem)
            for name in ("mode", "reason"):
                if stats[0][name] is not None and hasattr(source, name):
                    setattr(source, name, stats[0][name])


class _Gone(Exception):
    """The worker holding a finished task's result died before the result came back."""


def _quiet_all_exit(loop, context):
    """The client loop's exception handler: distributed's ``AllExit`` (its own signal that a gather
    should stop waiting, left on a task when a future is lost or cancelled mid-gather) is no error
    of the run, and is not printed as "Task exception was never retrieved"; anything else is."""
    exc = context.get("exception")
    if type(exc).__name__ == "AllExit" and type(exc).__module__.startswith("distributed"):
        return
    loop.default_exception_handler(context)


def quiet_client_loop(client):
    """Install :func:`_quiet_all_exit` on ``client``'s event loop."""
    loop = getattr(getattr(client, "loop", None), "asyncio_loop", None)
    if loop is not None:
        loop.set_exception_handler(_quiet_all_exit)


def _worker_pids(cluster):
    """PIDs of the worker processes of a LocalCluster's nannies (none for a joined cluster)."""
    pids = []
    for nanny in list(getattr(cluster, "workers", {}).values()):
        pid = getattr(getattr(getattr(nanny, "process", None), "process", None), "pid", None)
        if pid:
            pids.append(pid)
    return pids


def stop_cluster(client, cluster=None):
    """Close ``client`` and the ``cluster`` it started (None: a joined one stays), each step within
    :data:`CALL_SECONDS`: a local cluster whose workers are dying or being restarted by their
    nannies can take minutes to close, so what has not closed by then is killed (its own worker
    processes only)."""
    import signal
    pids = _worker_pids(cluster)
    try:
        client.close(timeout=CALL_SECONDS)
    except Exception:  # noqa: BLE001 - a lost scheduler: nothing left to close politely
        pass
    if cluster is None:
        return
    try:
        cluster.close(timeout=CALL_SECONDS)
        return
    except Exception:  # noqa: BLE001 - not closed in time: its workers end here
        pass
    for pid in set(pids + _worker_pids(cluster)):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:  # already gone
            pass
    # distributed's exit handler would otherwise try to close it again at the process's exit
    cluster.shutdown_on_close = False
    log.info("the local dask cluster did not close within %d s: its worker processes were killed", CALL_SECONDS)


def start_cluster(workers=None, scheduler=None):
    """A ``distributed.Client``: joined to ``scheduler`` (an address), or of a new ``LocalCluster``
    of ``workers`` single-threaded worker processes (each with ``cores // workers`` numba threads;
    dask gives each one BLAS thread). Returns (client, cluster or None)."""
    from distributed import Client, LocalCluster
    if scheduler is not None:
        client = Client(scheduler, timeout=SCHEDULER_TIMEOUT)
        if not client.nthreads():
            log.info("waiting for the first worker of the dask cluster at %s", scheduler)
            try:
                client.wait_for_workers(1, timeout=WORKER_WAIT)
            except TimeoutError:
                client.close()
                raise ClusterLost(f"no worker joined the dask cluster at {scheduler} within {WORKER_WAIT} s; start "
                                  f"its workers (dask's 'dask worker' command, one thread each)") from None
        return client, None
    n = int(workers)
    from streamrank._native.parallel import usable_cpus
    threads = max(1, usable_cpus() // n)  # the cores this process may use, not the machine's
    env = {k: str(threads) for k in ("NUMBA_NUM_THREADS",)}
    # idle OpenMP threads sleep rather than spin: workers share the machine's cores
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    import importlib.util
    dashboard = ":0" if importlib.util.find_spec("bokeh") else None  # the dashboard needs bokeh
    # distributed's nannies write their pre-spawn environment (OPENBLAS_NUM_THREADS=1,
    # OMP_NUM_THREADS=1, MKL_NUM_THREADS=1, PYTHONHASHSEED, ...) into this process's os.environ:
    # put it back once the workers run, or every process started from here later (a resumed
    # training, a test's subprocess) runs BLAS on one thread and fits another Nystroem map
    saved = dict(os.environ)
    try:
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address=dashboard, memory_limit=0, env=env)  # memory: --memory-budget
    except Exception as e:  # noqa: BLE001 - a worker process died as it started (killed, out of memory)
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ClusterLost(f"the local dask cluster of {n} workers did not start ({why.rstrip('.')})") from None
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return Client(cluster, timeout=SCHEDULER_TIMEOUT), cluster
