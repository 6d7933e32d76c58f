"""`lab conversation record RUN_DIR [--out FILE]`: the conversation a run had, as a conversation file
(lab/record/conversation.py), to replay under faults with `lab run SCENARIO --conversation FILE`."""
from __future__ import annotations

import sys
from pathlib import Path

from lab.errors import LabError
from lab.record.conversation import record


def add_parser(sub) -> None:
    p = sub.add_parser("conversation", help="conversations: record the one a run had")
    csub = p.add_subparsers(dest="conversation_command", metavar="ACTION")
    r = csub.add_parser("record", help="write the conversation a run folder had (user turns, tool calls, "
                                       "the model's words; no handles, keys or audio) as a conversation file")
    r.add_argument("run_dir", type=Path, help="a run folder (captures/<batch>/<run>)")
    r.add_argument("--out", type=Path, default=None, help="the file to write (default: stdout)")
    r.set_defaults(func=_cmd_record)
    p.set_defaults(func=lambda a: (p.print_help(), 0)[1])


def _cmd_record(args) -> int:
    if not args.run_dir.is_dir():
        raise LabError(f"{args.run_dir}: no such run folder")
    text = record(args.run_dir)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
        print(f"conversation: {args.out} ({text.count(chr(10) + '  - user:')} turns)", file=sys.stderr)
    return 0
