"""`python -m lab`: the lab's command line (lab.cli); `python -m lab fork-server SOCKET` is the fork
server (lab/forkserver/server.py), the same program pre-imported, which the orchestration starts
through this one entry point like every other process of the lab's."""
import sys

if sys.argv[1:2] == ["fork-server"]:
    # only this mode imports the server: it pre-imports the CLI itself, timed from its own start
    from lab.forkserver.server import main as serve

    serve(sys.argv[2:])
else:
    from lab.cli import main

    raise SystemExit(main())
