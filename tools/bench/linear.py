"""linear: linear RankSVM on MQ2008 Fold1 train (C = 1, eps = 1e-3): streamrank from HDF5 and from
the text, LIBLINEAR ranksvm and SVMrank, each a whole process."""
from .common import C, EPS
from .run import run_timed


def run(ctx):
    """Appends the section's rows to the first table (``ctx.rows``); objectives come after
    (mq2008.objectives)."""
    if ctx.data is None:
        return
    args, logs, models, env, py, work = ctx.args, ctx.logs, ctx.models, ctx.env, ctx.py, ctx.work
    rows, data, peers = ctx.rows, ctx.data, ctx.peers
    run_section, sr_train = ctx.run_section, ctx.sr_train
    text, h5 = data["text"], data["h5"]
    # untimed: numba's cache loaded (or written) once, as every timed child then finds it
    w = run_timed(sr_train(h5, models / "linear.warm.h5"), logs / "linear.warm", env=env, timeout=args.timeout)
    if w["error"]:
        print(f"streamrank's untimed warm-up run failed: {w['error']}")
    conv_h5 = work / "data" / "converted.h5"

    def text_steps(r):
        conv_h5.unlink(missing_ok=True)  # a fresh conversion every round (convert resumes otherwise)
        return [("convert", [py, "-m", "streamrank", "convert", text, "-o", conv_h5, "--json"], env),
                ("train", sr_train(conv_h5, models / f"sr_text.r{r}.h5"), env)]

    tools = [("streamrank (HDF5)", "sr_h5", lambda r: [("train", sr_train(h5, models / f"sr_h5.r{r}.h5"), env)],
              lambda r: models / f"sr_h5.r{r}.h5", "", "streamrank"),
             ("streamrank (text: convert + train)", "sr_text", text_steps,
              lambda r: models / f"sr_text.r{r}.h5", "", "streamrank")]
    ll, why = peers["liblinear"]
    tools.append(("LIBLINEAR ranksvm -s 8", "liblinear",
                  (lambda r: [("train", [ll, "-s", "8", "-c", f"{C:g}", "-e", f"{EPS:g}", text,
                                         models / f"liblinear.r{r}.model"], env)]) if ll else None,
                  lambda r: models / f"liblinear.r{r}.model", why or "", "liblinear"))
    sr, why = peers["svmrank"]
    c_sr = C * data["n_q"]
    tools.append((f"SVMrank -c {c_sr:g} (C x queries)", "svmrank",
                  (lambda r: [("learn", [sr, "-c", f"{c_sr:g}", text, models / f"svmrank.r{r}.model"], env)])
                  if sr else None,
                  lambda r: models / f"svmrank.r{r}.model",
                  why or "L1 hinge: a different objective, not comparable", "svmrank"))
    rows.extend(run_section("linear", tools))
