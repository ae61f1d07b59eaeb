"""Launch the SGLang server: ``python -m sglang.launch_server --model-path ... [options]``.

Like the real entry point it parses the server arguments and runs the HTTP server until it
is stopped (SIGTERM/SIGINT). A stack that cannot load ends the process with the traceback of
the real error and a non-zero status. See ``sglang.srt.entrypoints.http_server``.
"""

import sys

from sglang.srt.entrypoints.http_server import launch_server
from sglang.srt.server_args import prepare_server_args

if __name__ == "__main__":
    server_args = prepare_server_args(sys.argv[1:])
    launch_server(server_args)
