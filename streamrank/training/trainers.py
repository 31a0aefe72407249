"""One door to the three trainers: a method's settings (streamrank.settings, one table) in, its
trainer called with those that apply, a model and its summary out. The CLI, the estimators and the
grid train through it."""

import inspect


def trainer_of(method):
    """The trainer of ``method``: train_exact, train_clsr, or train_linear (primal and the maps)."""
    if method == "exact":
        from streamrank.training.exact import train_exact
        return train_exact
    if method == "clsr":
        from streamrank.training.clsr import train_clsr
        return train_clsr
    from streamrank.training.linear import train_linear
    return train_linear


def train(ds, values, **run):
    """``(model, summary)`` of ``values['method']`` (default primal) trained on ``ds``: its trainer
    with :func:`streamrank.settings.trainer_kwargs` (a setting that does not apply takes its
    default) and ``run``, the call's own arguments (valid, executor, queries)."""
    from streamrank import settings
    method = values.get("method") or settings.TABLE["method"].default
    trainer = trainer_of(method)
    accepted = inspect.signature(trainer).parameters
    kw = {k: v for k, v in settings.trainer_kwargs(method, values).items() if k in accepted}
    check = getattr(run.get("executor"), "check_datasets", None)
    if check is not None:  # on a cluster: every worker can read the data where it is, before the first pass
        from streamrank.io.dataset import why_unreadable
        check([d for d in (ds, run.get("valid")) if d is not None], why_unreadable)
    return trainer(ds, **kw, **run)
