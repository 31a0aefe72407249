"""Run an iterator in a background thread a few items ahead (reading, decompressing, generating
overlap the consumer's work; numpy, zlib, hashlib and numba kernels release the GIL)."""

import queue
import threading


def background(it, depth=2, name="streamrank-background"):
    """Yield the items of ``it``, produced by a thread ``depth`` items ahead, in order.

    The producer's exceptions are re-raised in the consumer. When the consumer stops early the
    producer is told to stop and joined; it never blocks forever on a full queue.
    """
    q = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def put(item):
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False  # the consumer has gone away

    def work():
        try:
            for item in it:
                if not put(item):
                    return
            put(done)
        except BaseException as exc:  # handed to the consumer
            put(exc)

    t = threading.Thread(target=work, name=name, daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        t.join()
