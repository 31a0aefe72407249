"""The export command: a model file written in a format another program scores (docs/formats.md)."""

import sys
from pathlib import Path

from streamrank.cli.common import _check_outputs, emit_json
from streamrank.export import FORMATS  # the list alone: the formats' modules load when one is written


def _export_paths(args):
    inputs = [("MODEL", args.model)]
    if args.feature_names:
        inputs.append(("--feature-names", args.feature_names))
    return inputs, [("-o", args.output, None)] if args.output != "-" else [], []


def _default_name(output):
    """OUT's file name without its suffix, stripped, or None (the library's default) when that
    leaves no printable name."""
    from streamrank.errors import ParameterError
    from streamrank.export import check_name
    stem = Path(output).stem.strip() if output != "-" else ""
    try:
        check_name(stem)
    except ParameterError:
        return None
    return stem


def _cmd_export(args):
    from streamrank.errors import ParameterError
    from streamrank.export import export_model, render
    from streamrank.state.model import load
    if args.json and args.output == "-":
        raise ParameterError("--json and -o - both write to standard output; pass -o FILE with --json")
    if args.output != "-":
        _check_outputs((args.output, "exported model", True))
    model = load(args.model)
    # the model's name inside the file: --name (an empty one refused), or the output's file name
    # without its suffix, or the library's default when that is no name
    name = args.name if args.name is not None else _default_name(args.output)
    if args.output == "-":
        content = render(model, args.format, feature_names=args.feature_names, name=name)
        if isinstance(content, bytes):
            out = getattr(sys.stdout, "buffer", None)
            if out is None or sys.stdout.isatty():
                raise ParameterError(f"format {args.format} is binary, and standard output is "
                                     f"{'a terminal' if out is not None else 'a text stream here'}; pass -o FILE "
                                     f"(e.g. -o model.{args.format}), or redirect standard output to a file")
            out.write(content)
        else:
            sys.stdout.write(content)
        sys.stdout.flush()
        return 0
    path = export_model(model, args.format, args.output, feature_names=args.feature_names, name=name)
    from streamrank.io.urls import is_url, size_of
    size = size_of(path) if is_url(path) else path.stat().st_size if path.is_file() else None
    if args.json:
        emit_json({"model": str(args.model), "format": args.format, "output": str(path), "bytes": size})
    elif not args.quiet:
        print(f"wrote {path}: {args.format}, {size:,} bytes" if size is not None else f"wrote {path}: {args.format}")
    return 0


def register(sub):
    x = sub.add_parser("export", help="write a model in a format another program scores: onnx, solr, elasticsearch, "
                                      "svmrank, liblinear or json (docs/formats.md)")
    x.add_argument("model", metavar="MODEL.h5", help="a model written by streamrank train, grid or cv")
    x.add_argument("--format", "-f", required=True, choices=FORMATS, metavar="FORMAT",
                   help="onnx (every model; needs pip install 'streamrank[export]'), solr, elasticsearch, svmrank, "
                        "liblinear (linear models), json (every model)")
    x.add_argument("-o", "--output", required=True, metavar="OUT", help="the file to write (- : standard output)")
    x.add_argument("--feature-names", metavar="FILE",
                   help="one name per line, for the model's input features in order (default f1..fd); solr, "
                        "elasticsearch, onnx and json carry them")
    x.add_argument("--name", default=None,
                   help="the model's name inside the file (solr, elasticsearch, onnx, json; "
                        "default: OUT's name without its suffix)")
    x.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    x.add_argument("--quiet", action="store_true", help="no summary")
    x.set_defaults(func=_cmd_export, paths=_export_paths)
