"""``kvlab serve``: kvlab's planner in a local web page (kvlab/web/app.py): a form over ``kvlab plan``, its answer
with each tier's exact curve, a table per CPU budget, the settings to paste and the same question as a command."""

import dataclasses
import os
import signal
import sys

from kvlab.cli.base import Outputs, Parser, add_arguments, run, summary
from kvlab.util.settings import setting
from kvlab.workloads import whole_number

UPLOAD_SECONDS = 60  # the longest a connection may send nothing (socketserver's per-connection timeout)


@dataclasses.dataclass
class ServeSettings:
    host: str = setting("127.0.0.1", help="the address to listen on (default %(default)s: this machine only)")
    port: int = setting(8000, convert=whole_number(0, 65535), help="the port (default %(default)s; 0: any free one)")
    models: str = setting(
        "models", help="the folder of shipped models, one config.json per subfolder (default %(default)s)"
    )
    max_upload_mib: int = setting(
        256, convert=whole_number(1, 65536), help="the most MiB one question may upload (default %(default)s)"
    )


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    add_arguments(parser, ServeSettings)
    return parser


def execute(args, parser):
    import tempfile
    from pathlib import Path

    from werkzeug.serving import WSGIRequestHandler, make_server

    from kvlab.web.app import make_app

    class Bounded(WSGIRequestHandler):
        """A connection that sends nothing for UPLOAD_SECONDS is closed: an upload is bounded in time too."""

        timeout = UPLOAD_SECONDS

    if not Path(args.models).is_dir():
        parser.error(f"argument --models: {args.models} is not a folder (the shipped models are in models/)")

    def stop(*_):  # a kill (SIGTERM) stops the page as Ctrl-C does: its folder removed, its work stopped
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)  # before the page says where it is: a kill may come at once
    with tempfile.TemporaryDirectory(prefix="kvlab-serve-") as folder:  # all it writes; removed at exit
        cache = Path(folder) / "cache"
        cache.mkdir()
        os.environ["KVLAB_CACHE"] = str(cache)  # the kernel database's answers too (kvlab/util/user_cache.py)
        app = make_app(args.models, folder, args.max_upload_mib * 2**20)
        try:
            server = make_server(args.host, args.port, app, threaded=True, request_handler=Bounded)
        except OSError as error:
            parser.error(f"argument --port: cannot listen on {args.host}:{args.port} ({error.strerror})")
        try:
            sys.stderr.write(
                f"{parser.prog}: the page is at http://{args.host}:{server.server_port}/ (Ctrl-C stops it)\n"
            )
            sys.stderr.flush()
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
            for job in app.jobs.values():
                job.cancel()
    return Outputs(stdout="")


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
