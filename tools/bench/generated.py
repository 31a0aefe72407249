"""Generated LETOR-like text (streamrank.synthetic) and cuts of it at a query boundary."""
import time
from pathlib import Path


def generated_text(path, preset, scale, part="train"):
    """Write ``path`` with streamrank.synthetic (seed 0) unless it is there; returns (path, bytes)."""
    path = Path(path)
    if not path.exists():
        from streamrank.synthetic import write_text
        print(f"generating {path} ({preset}, scale {scale:g}, seed 0, part {part}) ...", flush=True)
        t = time.perf_counter()
        write_text(path, preset=preset, scale=scale, seed=0, part=part)
        print(f"  {path.stat().st_size / 1e6:,.0f} MB in {time.perf_counter() - t:.1f} s", flush=True)
    return path, path.stat().st_size


def head_lines(src, dst, nbytes=None, rows=None):
    """The first ``nbytes`` bytes (cut at a line end) or the first ``rows`` lines of ``src`` written to
    ``dst``, cut further back to the last query boundary (qid runs are contiguous in generated data)."""
    dst = Path(dst)
    if dst.exists():
        return dst
    with open(src, "rb") as f:
        if nbytes is not None:
            data = f.read(nbytes)
            lines = data[:data.rfind(b"\n") + 1].splitlines(keepends=True)
        else:
            lines = []
            for ln in f:
                lines.append(ln)
                if len(lines) >= rows:
                    break
    if lines:
        nxt = None
        with open(src, "rb") as f:  # the line after the cut: is the last query complete?
            f.seek(sum(map(len, lines)))
            nxt = f.readline()
        last_q = lines[-1].split()[1]
        if nxt and nxt.split()[1] == last_q:
            while lines and lines[-1].split()[1] == last_q:
                lines.pop()
    tmp = dst.with_name(dst.name + ".tmp")
    with open(tmp, "wb") as fo:
        fo.writelines(lines)
    tmp.rename(dst)
    return dst
