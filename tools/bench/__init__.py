"""The peers bench, one module per section (tools/bench_peers.py runs cli.main): shared helpers in
common (settings, peers, data files), run (children, rows), objectives, models, generated, children
and context; the sections startup, firstuse, linear, exact (with mq2008: their data, objectives and
table), big, convert, nystroem, gbdt, scaling and export. The modules import ``_benchutil`` from
tools/, which the entry scripts put on sys.path."""
