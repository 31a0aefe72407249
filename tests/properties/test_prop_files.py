"""Files other writers leave (h5py, pandas, an editor of model files), for the commands that read
them: datasets whose ``/row`` is any permutation, missing, or not a permutation; version-1 model
files (no content digest) of every method with one array edited, the map's own sha256 rewritten
to match (a consistent writer of bad content). Every case ends as prop_checker demands; besides:

- a ``/row`` that is not a permutation of 0..n-1 is refused by predict, eval and grid; with a
  permutation (or none: the stored order) line ``row[i]`` of predict's scores is stored row i's;
- an edited model holding a value that is not finite, a divisor that is not positive or an array
  of another shape is refused by predict and export; one that loads scores the data finitely,
  within the loader's bound.
"""

import hashlib
import shutil

import h5py
import numpy as np
from hypothesis import given, note
from hypothesis import strategies as st

import prop_checker as pc
import prop_kit as kit
import prop_strategies as ps
from locations import DATA

# name -> (edit of a row array r of n entries, or None to delete /row; whether it must be refused)
ROW_VARIANTS = {
    "identity": (lambda r, rng: r, False),
    "shuffled": (lambda r, rng: rng.permutation(r), False),
    "reversed as int32": (lambda r, rng: r[::-1].astype(np.int32), False),
    "missing": (None, False),
    "duplicate": (lambda r, rng: np.r_[r[:-1], r[0]] if r.size > 1 else np.r_[1], True),
    "negative": (lambda r, rng: np.r_[-1, r[1:]], True),
    "10^12": (lambda r, rng: np.r_[r[:-1], 10 ** 12], True),
    "one past the end": (lambda r, rng: np.r_[r[:-1], r.size], True),
    "short": (lambda r, rng: r[:-1], True),
    "long": (lambda r, rng: np.r_[r, r.size], True),
    "float64": (lambda r, rng: r.astype(np.float64), True),
}


def _with_row(path, variant, seed):
    edit, _ = ROW_VARIANTS[variant]
    rng = np.random.default_rng(seed)
    with h5py.File(path, "r+") as f:
        r = f["row"][()]
        del f["row"]
        if edit is not None:
            f.create_dataset("row", data=edit(r, rng))
    return path


def _stored_order_scores(model_path, d):
    """The model's scores of ``d``'s rows in stored order (the reference for predict's lines)."""
    from streamrank.state.model import load
    return load(model_path).decision_function(np.asarray(d.X, np.float32), d.query_ptr, extra="ignore")


@kit.examples(10)
@given(data=st.data())
def test_row_variants_for_predict_eval_and_grid(prop_env, data):
    draw = data.draw
    d = draw(ps.datasets(min_rows=2, allow_breaks=False))
    variant = draw(st.sampled_from(sorted(ROW_VARIANTS)))
    command = draw(st.sampled_from(["predict", "predict", "eval", "grid"]))
    method = draw(st.sampled_from(kit.METHODS))
    note(d.describe())
    with prop_env.workspace() as (i, o, c):
        src = _with_row(ps.write_h5(d, i / "d.h5"), variant, draw(st.integers(0, 2 ** 16)))
        with h5py.File(src, "r") as f:
            row = f["row"][()] if "row" in f else np.arange(d.n)
        note(f"/row: {row.tolist()}")
        kinds = d.kinds + [f"/row {variant}"]
        if command == "predict":
            model = i / "m.h5"
            shutil.copy(prop_env.models[method], model)
            argv = ["predict", model, src, "-o", o / "s.txt", "--cache-dir", c, "--pad-features",
                    "--ignore-extra-features"]
            inputs, outputs, kinds = [src, model], [o / "s.txt"], kinds + [f"model {method}"]
        elif command == "eval":
            sc = i / "s.txt"
            sc.write_text("".join(f"{v!r}\n" for v in np.linspace(-1, 1, d.n)))
            argv, inputs, outputs = ["eval", src, sc, "--json", "--cache-dir", c], [src, sc], []
        else:
            argv = ["grid", prop_env.plain, "--valid", src, "-o", o / "run", "--C", "0.5,1", "--quiet",
                    "--cache-dir", c]
            inputs, outputs = [src, prop_env.plain], [o / "run"]
        bad = ROW_VARIANTS[variant][1]
        case = pc.Case(command, kinds, argv, inputs=inputs, outputs=outputs,
                       data=prop_env.data if command == "grid" else d,  # grid: f(0) of its training data
                       must_refuse=f"/row {variant} is not a permutation" if bad else "")
        res = pc.run_cli(argv)
        pc.check(case, res)
        if command == "predict" and res.rc == 0:
            lines = np.loadtxt(o / "s.txt", ndmin=1)
            want = _stored_order_scores(i / "m.h5", d)
            if not np.array_equal(lines[row], want):
                pc._fail(case, res, f"line row[i] is not stored row i's score: {lines[row]} vs {want}")


# -- version-1 model files with one array edited ----------------------------------------------------
MAP_ARRAYS = {"identity": (), "nystroem": ("landmarks", "landmark_rows", "eigenvalues", "projection"),
              "rff": ("omega", "b"), "exact": ("support",), "basis": ("basis", "basis_rows")}
# the edits: a value put at one index, or the array cut by one along its first axis
VALUES = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf, "0": 0.0, "-1": -1.0, "1e-310": 1e-310, "1e-300": 1e-300,
          "1e300": 1e300, "1e308": 1e308, "x1.0001": None}
NOT_FINITE = {"nan", "inf", "-inf"}
# divisors: a zscore scale (rows are multiplied by its reciprocal), Nystroem's eigenvalues
DIVISORS = {"normalize/scale", "feature_map/eigenvalues"}


def _v1_model(src, dst):
    """``src`` as a version-1 file: the same arrays, no content digest."""
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        f.attrs["version"] = 1
        if "content_sha256" in f.attrs:
            del f.attrs["content_sha256"]
    return dst


def _float_arrays(f):
    names = ["w"] + [f"normalize/{k}" for k in ("mean", "scale") if k in f.get("normalize", {})]
    kind = f["feature_map"].attrs["kind"]
    kind = kind.decode() if isinstance(kind, bytes) else str(kind)
    return names + [f"feature_map/{k}" for k in MAP_ARRAYS[kind] if f[f"feature_map/{k}"].dtype.kind == "f"], kind


def _reseal_map(f, kind):
    """The map's params sha256 recomputed over its arrays as stored (maps._sha256's recipe)."""
    import json
    g = f["feature_map"]
    if "params" not in g.attrs:
        return
    h = hashlib.sha256()
    for name in MAP_ARRAYS[kind]:
        a = np.ascontiguousarray(g[name][()])
        h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.data)
    p = json.loads(g.attrs["params"])
    p["sha256"] = h.hexdigest()
    g.attrs["params"] = json.dumps(p, sort_keys=True)


def _edit(path, draw):
    """One drawn edit of one float array; (kinds, why it must be refused or "")."""
    with h5py.File(path, "r+") as f:
        names, kind = _float_arrays(f)
        name = draw(st.sampled_from(names))
        a = f[name][()]
        how = draw(st.sampled_from(sorted(VALUES) + ["cut"]))
        if how == "cut":
            a = a[:-1] if a.shape[0] > 1 else np.concatenate([a, a])
        else:
            k = draw(st.integers(0, a.size - 1))
            flat = a.reshape(-1)
            flat[k] = flat[k] * 1.0001 if VALUES[how] is None else VALUES[how]
        del f[name]
        f.create_dataset(name, data=a)
        _reseal_map(f, kind)
    if how in NOT_FINITE:
        why = f"{name} holds {how}"
    elif how == "cut":
        why = f"{name} has another shape"
    elif name in DIVISORS and how in ("0", "-1"):
        why = f"the divisor {name} is {how}"
    elif name == "normalize/scale" and how == "1e-310":
        why = "a scale whose reciprocal overflows"
    else:
        why = ""
    return [f"v1 model edit {how}", f"v1 model array {name.split('/')[-1]}"], why


@kit.examples(10)
@given(data=st.data())
def test_edited_v1_models_for_predict_and_export(prop_env, data):
    draw = data.draw
    source = draw(st.sampled_from(list(kit.METHODS) + ["released zscore"] * 2))
    with prop_env.workspace() as (i, o, c):
        src = DATA / "model_v1.h5" if source == "released zscore" else prop_env.models[source]
        model = _v1_model(src, i / "m.h5")
        kinds, why = _edit(model, draw)
        kinds.append(f"v1 model of {source}")
        rows, rows_path = prop_env.data, prop_env.plain
        if source == "released zscore":  # 4 features: rows of its width (the ONNX check scores them)
            rows = ps.plain_data(2, d=4)
            rows_path = ps.write_h5(rows, i / "d4.h5")
        note(f"{source}: {kinds}, must refuse: {why!r}")
        fmt = draw(st.sampled_from(["predict", "predict", "onnx", "json", "solr", "elasticsearch", "svmrank"]))
        if fmt == "predict":
            argv = ["predict", model, rows_path, "-o", o / "s.txt"]
            command, out = "predict", o / "s.txt"
        else:
            out = o / f"m.{fmt}"
            argv = ["export", model, "--format", fmt, "-o", out]
            command = "export"
        case = pc.Case(command, kinds + [f"format {fmt}"], argv, inputs=[model], outputs=[out], data=rows,
                       must_refuse=why)
        res = pc.run_cli(argv)
        pc.check(case, res)
        if res.rc == 0 and command == "predict":
            from streamrank.state.model import load
            from streamrank.state.model_checks import score_bound
            s = np.loadtxt(out, ndmin=1)
            bound = score_bound(load(model))[0]
            if not np.abs(s).max() <= bound:
                pc._fail(case, res, f"a score {np.abs(s).max()!r} beyond the loader's bound {bound!r}")


# -- pandas' DataFrame.to_hdf files where a dataset goes ------------------------------------------
@kit.examples(4)
@given(data=st.data())
def test_pandas_files_are_named_as_such(prop_env, data):
    import pytest
    pd = pytest.importorskip("pandas")
    pytest.importorskip("tables")
    draw = data.draw
    fmt = draw(st.sampled_from(["fixed", "table"]))  # an empty frame in table format writes no frame
    key = draw(st.sampled_from(["df", "data", "ranking", "a/b"]))
    n = draw(st.integers(0, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    frame = pd.DataFrame({"qid": rng.integers(1, 4, n), "label": rng.integers(0, 3, n),
                          **{f"f{j}": rng.standard_normal(n) for j in range(draw(st.integers(1, 4)))}})
    command = draw(st.sampled_from(["info", "train", "predict"]))
    with prop_env.workspace() as (i, o, c):
        src = i / "frame.h5"
        frame.to_hdf(src, key=key, mode="w", format=fmt)
        argv = {"info": ["info", src], "train": ["train", src, "-o", o / "m.h5", "--cache-dir", c],
                "predict": ["predict", prop_env.models["primal"], src, "-o", o / "s.txt", "--cache-dir", c]}[command]
        outputs = {"info": [], "train": [o / "m.h5"], "predict": [o / "s.txt"]}[command]
        case = pc.Case(command, [f"pandas to_hdf {fmt}"], argv, inputs=[src], outputs=outputs,
                       must_refuse="a pandas file is not a streamrank dataset")
        res = pc.run_cli(argv)
        pc.check(case, res)
        if "a pandas DataFrame (DataFrame.to_hdf, key" not in res.err and not (n == 0 and "a PyTables file" in res.err):
            pc._fail(case, res, "a pandas file refused without saying it is one")
