"""The code of the nystroem, convert and gbdt sections' peer children (each run as ``python -c CODE
ARGS``)."""

SKLEARN_LOAD = r"""
import json, os, sys, time
from sklearn.datasets import load_svmlight_file
t = time.perf_counter()
X, y, q = load_svmlight_file(sys.argv[1], query_id=True)
print(json.dumps({"seconds": time.perf_counter() - t, "rows": X.shape[0], "bytes": os.path.getsize(sys.argv[1])}))
"""

SKLEARN_NYSTROEM = r"""
import json, sys, time
import numpy as np
from sklearn.datasets import dump_svmlight_file, load_svmlight_file
from sklearn.kernel_approximation import Nystroem
src, out, arrays = sys.argv[1], sys.argv[2], sys.argv[3]
gamma, m, d = float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
t = time.perf_counter()
X, y, q = load_svmlight_file(src, query_id=True, n_features=d, zero_based=False)
t_load = time.perf_counter() - t
nys = Nystroem(kernel="rbf", gamma=gamma, n_components=m, random_state=0).fit(X)
Z = nys.transform(X)
t_map = time.perf_counter() - t - t_load
dump_svmlight_file(Z, y, out, zero_based=False, query_id=q)
# the fitted map as plain arrays (no pickle): transform(X) = K(X, components) normalization^T
np.savez(arrays, components=np.asarray(nys.components_.toarray() if hasattr(nys.components_, "toarray")
                                       else nys.components_, np.float64), normalization=nys.normalization_)
t_write = time.perf_counter() - t - t_load - t_map
print(json.dumps({"load_seconds": t_load, "map_seconds": t_map, "write_seconds": t_write,
                  "components": int(Z.shape[1])}))
"""

GBDT = r"""
import json, sys, time
import h5py
import numpy as np
from sklearn.datasets import load_svmlight_file
tool, train_h5, test_txt, scores_out, d = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
t = time.perf_counter()
with h5py.File(train_h5, "r") as f:  # streamrank's converted file: X float32 (n, d), y (n,), query_ptr
    X, y, ptr = f["X"][:], f["y"][:], f["query_ptr"][:]
groups = np.diff(ptr)
t_load = time.perf_counter() - t
t = time.perf_counter()
if tool == "lightgbm":
    import lightgbm as lgb
    model = lgb.LGBMRanker(n_estimators=100, num_threads=2, verbose=-1).fit(X, y, group=groups)
    version = lgb.__version__
else:
    import xgboost as xgb
    model = xgb.XGBRanker(n_estimators=100, objective="rank:ndcg", n_jobs=2).fit(
        X, y, qid=np.repeat(np.arange(groups.size), groups))
    version = xgb.__version__
t_fit = time.perf_counter() - t
Xt, yt, qt = load_svmlight_file(test_txt, query_id=True, n_features=d, zero_based=False)
np.savetxt(scores_out, model.predict(Xt.toarray().astype(np.float32)), fmt="%.17g")
print(json.dumps({"load_seconds": t_load, "fit_seconds": t_fit, "version": version, "rows": int(X.shape[0])}))
"""
