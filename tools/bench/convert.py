"""convert: streamrank convert against scikit-learn's load_svmlight_file on the big text and its
head: MB/s of text and peak RSS."""
import statistics

from _benchutil import record, table

from .common import BIG_PRESET
from .children import SKLEARN_LOAD
from .generated import head_lines
from .run import add_note, data_rows, echoed, json_value, new_row, run_timed, summarise


def run(ctx):
    """Runs the section's tools (interleaved rounds), computes its figures; returns the function that
    prints (and records) its table, or None when it cannot run."""
    if ctx.big is None:
        return None
    args, logs, env, py = ctx.args, ctx.logs, ctx.env, ctx.py
    sr_convert = ctx.sr_convert
    ll, ll_why = ctx.peers["liblinear"]
    big = ctx.big
    btext = big["text"]
    piece = head_lines(btext, big["dir"] / f"{big['stem']}-head{args.slice_mb}MB.txt",
                       nbytes=args.slice_mb * 10 ** 6)
    pbytes = piece.stat().st_size
    dst = big["dir"] / "convert.out.h5"
    whole = pbytes >= big["bytes"]
    inputs = [("whole", btext, big["bytes"])] + ([] if whole else [("head", piece, pbytes)])
    res = {k: [] for k in ("sr.whole", "sr.head", "sk.head", "sk.whole")}
    for r in range(args.repeats):
        for name, src, _ in inputs:
            dst.unlink(missing_ok=True)
            res[f"sr.{name}"].append(run_timed(sr_convert(src, dst), logs / f"convert.sr.{name}.r{r}", env=env,
                                               timeout=args.timeout))
        res["sk.head"].append(run_timed([py, "-c", SKLEARN_LOAD, piece], logs / f"convert.sk.head.r{r}", env=env,
                                        timeout=args.timeout))
    dst.unlink(missing_ok=True)
    sk_note = ""
    ok = [x for x in res["sk.head"] if not x["error"]]
    if not whole and ok and args.sklearn_full != "no":
        f = big["bytes"] / pbytes
        est_s = statistics.median(x["wall_s"] for x in ok) * f
        est_mb = max(x["rss_mb"] or 0 for x in ok) * f
        # its time grows faster than the file (measured: 9.2 s for the first 200 MB, 766 s for all
        # 1,693 MB, 7.5 min of it system time), so only a short extrapolation is trusted
        if args.sklearn_full == "yes" or (f <= 4 and est_s < 180 and est_mb < 4000):
            for r in range(args.repeats):
                res["sk.whole"].append(run_timed([py, "-c", SKLEARN_LOAD, btext], logs / f"convert.sk.whole.r{r}",
                                                 env=env, timeout=args.timeout))
        else:
            sk_note = (f"the whole file not run (--sklearn-full yes runs it): {f:.1f} times the head, whose "
                       f"figures scaled by {f:.1f} give ~{est_s:.0f} s and ~{est_mb:,.0f} MB; the time is a lower "
                       f"bound: it grows faster than the file (766 s for 1,693 MB, 9.2 s for 200 MB, measured)")
    crows = []
    for key, tool, inp, nbytes in (("sr.whole", "streamrank convert", "whole", big["bytes"]),
                                   ("sr.head", "streamrank convert", f"first {args.slice_mb} MB", pbytes),
                                   ("sk.whole", "scikit-learn load_svmlight_file(query_id=True)", "whole",
                                    big["bytes"]),
                                   ("sk.head", "scikit-learn load_svmlight_file(query_id=True)",
                                    f"first {args.slice_mb} MB" if not whole else "whole", pbytes)):
        if not res[key] and not (key == "sk.whole" and sk_note):
            continue
        row = new_row("convert", tool)
        row["input"] = inp
        row["mb"] = nbytes / 1e6
        okr = summarise(row, res[key]) if res[key] else []
        if key == "sk.whole" and sk_note:
            add_note(row, sk_note)
        if okr:
            row["mbs"] = row["mb"] / row["median"]
            own = [json_value(x, "seconds") for x in okr]
            own = [s for s in own if s]
            if own:
                row["own_s"] = statistics.median(own)
                row["own_mbs"] = row["mb"] / row["own_s"]
        crows.append(row)

    def print_convert():
        print()
        cols = [("section", "section", None), ("tool", "tool", None), ("input", "input", None),
                ("mb", "text MB", "{:,.0f}"), ("median", "median s (whole process)", "{:.2f}"),
                ("mbs", "MB/s (whole process)", "{:.1f}"), ("own_s", "parse s (its own clock)", "{:.2f}"),
                ("own_mbs", "MB/s (its own clock)", "{:.1f}"), ("runs", "each run s", None),
                ("rss", "peak RSS MB", "{:,.0f}"), ("note", "note", None)]
        table(crows, cols)
        notes = []
        with echoed(notes):
            print()
            print(f"convert: {big['text'].name} ({big['bytes'] / 1e6:,.0f} MB) and its first {args.slice_mb} MB cut at "
                  f"a query boundary ({pbytes / 1e6:,.0f} MB), in the page cache; streamrank: convert IN -o OUT.h5 "
                  f"--json "
                  f"(a fresh OUT every round; its own clock: the --json seconds); scikit-learn: load_svmlight_file(IN, "
                  f"query_id=True) in a process of its own (its own clock: the call alone, without the imports); "
                  f"MB/s = text MB / seconds")
        record("peers", "convert", data_rows(crows), cols, notes=notes,
               params={"preset": BIG_PRESET, "scale": args.big_scale, "slice_mb": args.slice_mb,
                       "sklearn_full": args.sklearn_full, "repeats": args.repeats})
    return print_convert
