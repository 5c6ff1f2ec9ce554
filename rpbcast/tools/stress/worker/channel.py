"""The worker's end of the JSON-lines channel to the orchestrator: events
out on stdout, commands in on stdin."""
from __future__ import annotations

import json
import queue
import sys
import threading


def emit(**ev):
    """One event to the orchestrator."""
    sys.stdout.write(json.dumps(ev) + "\n")
    sys.stdout.flush()


def commands() -> queue.Queue:
    """The orchestrator's commands, read on a thread of their own; stdin
    closing (the orchestrator went away) reads as a stop."""
    q = queue.Queue()

    def read():
        for line in sys.stdin:
            line = line.strip()
            if line:
                q.put(json.loads(line))
        q.put({"cmd": "stop"})

    threading.Thread(target=read, daemon=True).start()
    return q
