"""The one table of training settings, from the command line and the estimators to the trainers.

Each :class:`Setting` is one entry: the trainers' name for it (also the saved config's key and the
range's name in :data:`streamrank.params.RANGES`), the CLI's flag, the default, the methods it
applies to (and the other setting it depends on, such as ``degree`` on ``kernel="poly"``), the
estimators' name where scikit-learn's convention differs (``n_components``, ``random_state``), the
kind of value the CLI parses, and the help text. From the table come:

- the options of ``train``, ``grid`` and ``cv`` (:func:`streamrank.cli.train_commands.add_model_options`),
- the flag translation of library messages (``streamrank.cli.common.FLAGS``),
- the "applies only to" checks (:func:`inapplicable`),
- the estimators' parameters, their signature and their docstrings (:func:`estimator_params`),
- and the trainers' keyword arguments for one method (:func:`trainer_kwargs`).

The rule for a setting that does not apply (decided once, here):

- **The CLI refuses it** (exit 2, naming the flag and the methods it applies to): a person at a
  prompt who passes ``--gamma`` to a linear run meant something, and should hear that it did nothing.
- **The API accepts and ignores it**, as scikit-learn's ``SVC`` ignores ``gamma`` for a linear
  kernel: one estimator's parameters then serve every method, so ``GridSearchCV`` over
  ``{"method": ["primal", "nystroem"], "gamma": [...]}`` works, and ``clone`` round-trips them.
- **The saved model records only what applied**: :func:`trainer_kwargs` passes a trainer the
  settings of its method alone (the others at their defaults, which the trainers leave out of the
  config), so a primal model trained with ``gamma=0.5`` is the primal model trained without it.

Ranges (numbers) are checked where the trainers take the values (:mod:`streamrank.params`, one
table of ranges), whichever face they came from.
"""

import inspect
from dataclasses import dataclass

from streamrank.errors import ParameterError
from streamrank.params import EXACT_GAP_TOL

METHODS = ("primal", "nystroem", "rff", "exact", "clsr")
RANKSVM = ("primal", "nystroem", "rff", "exact")  # the pairwise hinge's methods (C, loss, solver)
MAPS = ("nystroem", "rff")
KERNELS = ("nystroem", "rff", "exact", "clsr")
LOSSES = ("squared_hinge", "smooth_hinge")
DEFAULT_MEMORY_BUDGET = "2GB"
DEFAULT_COMPONENTS = 1000  # Nystroem landmarks and random features (CLSRRank: every training row)
DEFAULT_MAX_ITER = 1000


@dataclass(frozen=True)
class Setting:
    """One training setting. ``default`` is what a trainer takes when the setting is not given;
    ``methods`` those it applies to, and ``when`` ``(other, values)``: only where setting
    ``other`` takes one of ``values`` (its default counted). ``kind`` says how the CLI parses it:
    ``choice`` (of ``choices``), ``values`` (numbers in the grid grammar 0.1,1 or 2^-5:2^5),
    ``int`` / ``posint`` / ``float`` / ``text``; ``many`` how grid and cv take it: ``"one"`` (as
    train does), ``"list"`` (several, each a configuration), ``"search"`` (one; when none of the
    ``"search"`` settings is given, the grid tries the default and paper 001's setting,
    :data:`streamrank.workflow.grid.COST_SENSITIVE`) or ``"none"`` (not at all). ``api``: the
    estimators' name where it is not ``name``; ``flag``: None where no flag sets it."""

    name: str
    flag: object
    default: object
    methods: tuple
    kind: str
    help: str
    choices: tuple = ()
    when: tuple = ()
    api: object = "same"
    many: str = "one"
    metavar: object = None
    words: tuple = ()
    api_help: str = ""  # the estimators' words where they differ from the CLI's
    instead: str = ""   # where it does not apply: what takes its place, said with the refusal
    # ``(methods, ((other, values), ...))``: for these methods, only where one of the other
    # settings takes one of its values (its default for the method counted)
    unless: tuple = ()
    # ``((method, default), ...)``: the methods whose default is not ``default``
    defaults: tuple = ()

    @property
    def api_name(self):
        return self.name if self.api == "same" else self.api

    def applies(self, method, others=None):
        """Whether this setting applies to ``method`` with the other settings ``others`` (name ->
        value; an absent one at its default)."""
        if method not in self.methods:
            return False
        if self.unless and method in self.unless[0]:
            def holds(other, allowed):
                value = (others or {}).get(other)
                value = default_for(other, method) if value is None else value
                return (value.strip().lower() if isinstance(value, str) else value) in allowed
            if not any(holds(*alt) for alt in self.unless[1]):
                return False
        if self.when:
            other, allowed = self.when
            value = (others or {}).get(other)
            return (TABLE[other].default if value is None else value) in allowed
        return True


def _s(*args, **kw):
    s = Setting(*args, **kw)
    return s.name, s


_SMOOTH = ("squared_hinge (RankSVM) or smooth_hinge (paper 001's cs-sRSVM: the hinge smoothed in a band of "
           "half-width --eta around margin 0)")

TABLE = dict([
    _s("method", "--method", "primal", METHODS, "choice",
       "primal (linear RankSVM), nystroem or rff (paper 000), exact (paper 004), clsr (paper 002: CLSRRank, least "
       "squares over kernel coefficients, one pass and a direct solve)", choices=METHODS, many="list",
       metavar="M[,M...]"),
    _s("C", "--C", 1.0, RANKSVM, "values",
       "the loss weight: values 0.1,1,10 or powers 2^-5:2^5 (step 2: 2^-5:2^5:2); several (with --valid) form a "
       "warm-started path", many="list", metavar="C[,C...]", words=("two-stage",),
       instead="--method clsr is penalised by --lambda in its place"),
    _s("lam", "--lambda", 1e-3, ("clsr",), "values",
       "--method clsr's penalty lambda m ||alpha||^2, values as --C; several form a path chosen on --valid, all from "
       "one pass over the data", many="list", metavar="L[,L...]", instead="the other methods take --C"),
    _s("select_metric", "--select-metric", "meanndcg", METHODS, "choice",
       "what --valid chooses by; avgndcg and avgprec are paper 001's means of NDCG@1..20 and P@1..20",
       choices=("meanndcg", "ndcg@10", "map", "avgndcg", "avgprec")),
    _s("convention", "--convention", "letor4", METHODS, "choice",
       "the gains of every ranking metric of the run (what --valid chooses by; grid's and cv's tables): letor4 "
       "(LETOR 4.0's Eval-Score-4.0.pl, gains 0/1/3 for labels 0/1/2, extended as 2^y - 1 above 2 with a note "
       "wherever a metric is shown) or standard (gain 2^y - 1, discount 1/log2(i+1))",
       choices=("letor4", "standard")),
    _s("kernel", "--kernel", "rbf", KERNELS, "choice",
       "the kernel of nystroem, rff (rbf or laplacian), exact and clsr",
       choices=("rbf", "laplacian", "poly", "sigmoid", "linear")),
    _s("gamma", "--gamma", None, KERNELS, "values",
       "kernel width, values as --C; several form a path, one map each (default: 1/n_features)", many="list",
       metavar="G[,G...]"),
    _s("degree", "--degree", 3, ("nystroem", "exact", "clsr"), "int", "poly kernel degree",
       when=("kernel", ("poly",))),
    _s("coef0", "--coef0", 1.0, ("nystroem", "exact", "clsr"), "float", "poly / sigmoid offset",
       when=("kernel", ("poly", "sigmoid"))),
    _s("components", "--components", DEFAULT_COMPONENTS, MAPS + ("clsr",), "posint",
       "Nystroem landmarks or random features, CLSRRank basis rows (default 1000 landmarks or features; "
       "CLSRRank: every training row)", api="n_components", many="list", metavar="M", defaults=(("clsr", None),)),
    _s("rank", "--rank", None, ("nystroem",), "posint", "keep the top K Nystroem eigenvectors (default: all)",
       metavar="K"),
    _s("map_cache", "--map-cache", "auto", MAPS, "choice",
       "mapped rows: in memory if they fit, else on disk under --cache-dir or recomputed each pass, chosen from "
       "measured rates; the model is the same either way", choices=("auto", "memory", "cache", "recompute")),
    _s("map_rows", "--map-rows", "auto", ("nystroem",), "choice",
       "what the passes keep of each row: features (phi in float32), kernel (K(x, L) in float32, the projection "
       "applied to vectors: mapping costs about a fifth), or auto (kernel where its float32 rounding through the "
       "projection stays within 1e-5 of the float64 oracle and every landmark is kept, else features)",
       choices=("auto", "features", "kernel")),
    _s("solver", "--solver", "tron", RANKSVM, "choice",
       "tron (the same bits for any memory budget), newton_cholesky, newton_yuan (paper 001: Newton steps, Yuan's "
       "step length every third), or auto (tron or newton_cholesky from measured pass and Hessian costs, so it may "
       "differ between runs); --method exact takes tron or newton_yuan",
       choices=("auto", "tron", "newton_cholesky", "newton_yuan")),
    _s("precondition", "--precondition", "auto", RANKSVM, "choice",
       "TRON's CG preconditioned: fewer CG steps and passes. auto = on: up to 256 features the Hessian of a sample "
       "of queries; wider maps a rank-192 Nystrom sketch of the Hessian at w = 0 (one pass per map, seeded by "
       "--seed); --method exact: a Nystroem approximation of the Hessian from about 10 sqrt(rows) landmarks",
       choices=("auto", "on", "off")),
    _s("features", "--features", None, METHODS, "text",
       "train on these features only (ids as in the data, 1-based: 3,7,12; a file of ids; or the first K of "
       "streamrank select-features' GAS file); predict applies the same subset (default: all)",
       metavar="IDS|@FILE|GAS.h5:K"),
    _s("loss", "--loss", "squared_hinge", RANKSVM, "choice", _SMOOTH, choices=LOSSES, many="list",
       metavar="L[,L...]"),
    _s("eta", "--eta", None, RANKSVM, "text",
       "--loss smooth_hinge's band half-width, 0 < E < 1, or auto (default): paper 001's rule from C and the pair "
       "weights, recorded per C", when=("loss", ("smooth_hinge",)), many="list", metavar="E|auto", words=("auto",)),
    _s("pair_cost", "--pair-cost", "none", RANKSVM, "text",
       "label-pair costs lambda (paper 001): none, graded (paper 001's 0-1:1,1-2:1.3,0-2:2 on grades 0-2, "
       "log2(1 + gain difference) on other grades), gain_difference, or pairs such as '0-1:1,1-2:1.3,0-2:2' "
       "(unlisted pairs cost 1)", metavar="SPEC", many="search"),
    _s("query_weight", "--query-weight", "none", RANKSVM, "choice", "paper 001's query weights mu_q",
       choices=("none", "log_ratio"), many="search"),
    _s("tol", "--tol", 1e-3, RANKSVM, "float",
       "stop when ||g|| <= EPS ||g0|| (TRON's and LIBLINEAR's rule; --method exact stops on --gap-tol instead, "
       "unless --gap-tol off or --precondition off)",
       metavar="EPS", unless=(("exact",), (("gap_tol", ("off",)), ("precondition", ("off",)),
                                           ("kernel", ("linear",)), ("solver", ("newton_yuan",)))),
       instead="with its preconditioned TRON the exact kernel stops where its estimated objective gap is at most "
               "--gap-tol, default 1e-6"),
    _s("gap_tol", "--gap-tol", None, RANKSVM, "float",
       "stop when the relative objective gap (f - f*)/f is at most G, in place of --tol's rule: a rigorous bound "
       "||g||^2/2f for linear and mapped models, the preconditioner's estimate for --method exact (default: 1e-6 "
       "for --method exact, off for the others; off, or no estimate (exact with --precondition off, --kernel linear "
       "or --solver newton_yuan): --tol's rule; every log line and --json report the gap either way)",
       many="none", metavar="G", words=("off",), defaults=(("exact", EXACT_GAP_TOL),)),
    _s("abs_gtol", "--abs-gtol", None, RANKSVM, "float",
       "--solver newton_yuan also stops at ||g|| <= EPS2 (paper 001's eps2, 1e-4 there; default: off)",
       when=("solver", ("newton_yuan",)), metavar="EPS2"),
    _s("abs_dtol", "--abs-dtol", None, RANKSVM, "float",
       "--solver newton_yuan also stops when its Newton direction's norm is <= EPS3 (paper 001's eps3, 1e-4 there; "
       "default: off)", when=("solver", ("newton_yuan",)), metavar="EPS3"),
    _s("max_iter", "--max-iter", DEFAULT_MAX_ITER, RANKSVM, "posint", "solver iterations per C at most",
       metavar="N"),
    _s("seed", "--seed", 0, METHODS, "int",
       "fixes every random choice: landmarks, random features, basis rows, the preconditioner's sketch",
       api="random_state", metavar="S",
       api_help="int >= 0, None (one drawn from numpy's global RandomState) or a numpy RandomState / Generator "
                "(one drawn from it); the model records the seed used, so resume needs an int"),
    _s("normalize", "--normalize", "none", METHODS, "choice",
       "feature scaling fitted on the training data and stored in the model",
       choices=("none", "zscore", "query_minmax")),
    _s("memory_budget", "--memory-budget", DEFAULT_MEMORY_BUDGET, METHODS, "text",
       "bound on the process's memory: blocks, caches and solver state", metavar="SIZE"),
    _s("block_bytes", None, None, METHODS, "text",
       "bytes of a block of the stream (None: the memory plan's; the model is the same for any)"),
    _s("cache_dir", "--cache-dir", None, METHODS, "text",
       "where text DATA is converted (default ~/.cache/streamrank) and mapped rows are cached (default: not "
       "cached, recomputed each pass)", metavar="DIR"),
    _s("cache_size", "--cache-size", None, ("primal",) + MAPS, "text",
       "cap on all feature caches in --cache-dir together; least recently used blocks are evicted (default: no "
       "cap)", metavar="SIZE"),
    _s("checkpoint", "--checkpoint", None, METHODS, "text",
       "write a checkpoint after every iteration (default: none)", many="none", metavar="DIR"),
    _s("resume", "--resume", False, METHODS, "flag", "continue from the checkpoint in --checkpoint DIR",
       many="none"),
])


def default_cache_dir():
    """Where converted text and stored kernel matrices go when no cache directory is given:
    ``$XDG_CACHE_HOME/streamrank``, ``~/.cache/streamrank`` without it (read at each call)."""
    import os
    from pathlib import Path
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "streamrank"


def flags():
    """Library name -> CLI flag, for every setting a flag sets."""
    return {s.name: s.flag for s in TABLE.values() if s.flag}


def inapplicable(given, methods):
    """A :class:`ParameterError` in the CLI's words naming the settings of ``given`` (name ->
    value: those a person passed; None is not given) that apply to none of ``methods``, or that
    depend on another setting none of whose given values (or its default) lets them apply; None
    when all apply. The CLI's half of the rule (module docstring)."""
    given = {k: v for k, v in given.items() if v is not None and k in TABLE and TABLE[k].flag}
    off = [TABLE[k] for k in given if not set(methods) & set(TABLE[k].methods)]
    if len(off) == 1:
        s = off[0]
        return ParameterError(f"{s.flag} applies to --method {' or '.join(s.methods)}, not to {', '.join(methods)}; "
                              f"drop {s.flag}"
                              + (f" ({s.instead})" if s.instead else f" or pass --method {s.methods[0]}"))
    if off:
        names = ", ".join(s.flag for s in off)
        why = "; ".join(f"{s.flag} to {' or '.join(s.methods)}" for s in off)
        instead = "".join(f"; {s.instead}" for s in off if s.instead)
        return ParameterError(f"{names} do not apply to --method {', '.join(methods)} ({why}); drop {names}{instead}")
    for k in given:
        s = TABLE[k]
        if s.unless and set(methods) <= set(s.unless[0]) and not s.applies(methods[0], given):
            only, alts = s.unless
            with_ = " or ".join(f"{TABLE[o].flag} {' or '.join(v)}" for o, v in alts)
            first = f"{TABLE[alts[0][0]].flag} {alts[0][1][0]}"
            return ParameterError(f"{s.flag} applies to --method {' or '.join(only)} only with {with_} ({s.instead}); "
                                  f"pass {first} or drop {s.flag}")
    for k in given:
        s = TABLE[k]
        if s.when:
            other, allowed = s.when
            o = TABLE[other]
            got = given.get(other, o.default)
            got = got if isinstance(got, list) else [got]
            if not set(got) & set(allowed):
                return ParameterError(f"{s.flag} applies to {o.flag} {' or '.join(allowed)} only; got {o.flag} "
                                      f"{','.join(map(str, got))}. Pass {o.flag} {allowed[0]} or drop {s.flag}")
    return None


def default_for(name, method):
    """Setting ``name``'s default for ``method``: the table's, or the method's own where the
    entry names one (``Setting.defaults``: CLSRRank's basis is every training row, components
    None; the exact kernel stops on its estimated gap, :data:`streamrank.params.EXACT_GAP_TOL`)."""
    s = TABLE[name]
    return dict(s.defaults).get(method, s.default)


def trainer_kwargs(method, values):
    """Every setting's value for ``method``'s trainer from ``values`` (name -> value; absent or
    None: the default): a setting that does not apply to the method (or to the other values)
    takes its default, so the trainer records only what applied (the API's half of the rule)."""
    out = {}
    for name, s in TABLE.items():
        v = values.get(name)
        out[name] = default_for(name, method) if v is None or not s.applies(method, values) else v
    out["method"] = method
    return out


# settings whose None means their default, as scikit-learn's random_state=None does (pair_cost and
# query_weight took None for "none" before "none" was their one default)
NONE_MEANS_DEFAULT = ("pair_cost", "query_weight", "seed")


def validate(values):
    """Refuse, as :class:`ParameterError`, a value of ``values`` (name -> value; None: not given)
    outside its range or its choices, whether or not it applies: the estimators' intake, as
    scikit-learn checks every parameter's constraints in ``fit``. Numbers by
    :mod:`streamrank.params`; a word among the setting's choices (a callable kernel passes: CLSRRank
    takes one); the trainers check the rest (pair cost specs, sizes, feature lists) and compute
    with the values as checked (``n_components="1"`` is 1)."""
    from streamrank import params
    for name, v in values.items():
        s = TABLE.get(name)
        if s is not None and v is None and name not in NONE_MEANS_DEFAULT and \
                all(default_for(name, m) is not None for m in s.methods):
            example = repr(s.default) if isinstance(s.default, str) else s.default
            raise ParameterError(f"{s.api_name} must be given (None is not one of its values); got None. "
                                 f"Use {s.api_name}={example}")
        if s is None or v is None or (isinstance(v, str) and v.strip().lower() in s.words):
            continue
        if s.choices and isinstance(v, str) and v not in s.choices:
            raise ParameterError(f"{s.api_name} must be one of {', '.join(s.choices)}; got {v!r}. "
                                 f"Use {s.api_name}={s.default}")
        if name in params.RANGES and s.kind in ("values", "int", "posint", "float"):
            params.check_all(name, v, shown=s.api_name)


def estimator_params(methods, exclude=()):
    """``[(estimator name, setting)]`` of the settings an estimator over ``methods`` takes, in the
    table's order, less those named in ``exclude``."""
    return [(s.api_name, s) for s in TABLE.values()
            if s.name not in exclude and set(s.methods) & set(methods)]


def estimator_signature(methods, extra=(), exclude=()):
    """The keyword-only ``__init__`` signature of an estimator over ``methods``: the table's
    settings (defaults for ``methods[0]`` where a method has its own), then ``extra``
    ``[(name, default)]`` (the estimator's own, such as ``verbose``)."""
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(name, kw, default=default_for(s.name, methods[0]) if len(methods) == 1 else s.default)
               for name, s in estimator_params(methods, exclude)]
    params += [inspect.Parameter(name, kw, default=d) for name, d in extra]
    return inspect.Signature(params)


_FLAG = None


def api_words(text):
    """``text`` with each CLI flag of the table written as the estimators' parameter name."""
    global _FLAG
    import re
    if _FLAG is None:
        names = {s.flag: s.api_name or s.name for s in TABLE.values() if s.flag}
        names["--valid"] = "fit's valid"
        _FLAG = (re.compile("|".join(sorted(map(re.escape, names), key=len, reverse=True)) + r"\b"), names)
    pattern, names = _FLAG
    return pattern.sub(lambda m: names[m.group(0)], text)


def estimator_doc(methods, exclude=()):
    """The numpydoc Parameters entries of an estimator over ``methods``, from the table."""
    lines = []
    for name, s in estimator_params(methods, exclude):
        default = default_for(s.name, methods[0]) if len(methods) == 1 else s.default
        kind = f"{{{', '.join(repr(c) for c in s.choices)}}}" if s.choices else {
            "values": "float or list of float", "int": "int", "posint": "int", "float": "float",
            "flag": "bool"}.get(s.kind, "str")
        notes = []
        if not set(methods) <= set(s.methods):
            notes.append(f"Applies to method {', '.join(s.methods)}; ignored otherwise.")
        if s.when:
            notes.append(f"Applies with {TABLE[s.when[0]].api_name} {' or '.join(s.when[1])}; ignored otherwise.")
        text = api_words(s.api_help or s.help)
        lines += [f"{name} : {kind}, default={default!r}", f"    {text[0].upper()}{text[1:]}."]
        lines += [f"    {n}" for n in notes]
    return "\n".join(lines)
