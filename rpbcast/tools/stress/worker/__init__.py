"""One process of `rpbcast stress`: a sender, a receiver or a logger, run as
``python -m rpbcast.tools.stress.worker SPEC`` (SPEC: JSON, built by
``rpbcast.tools.stress.plan``).

Driven by JSON lines (``channel``): commands on stdin ({"cmd": "start" |
"expect" | "stop"}), events on stdout ({"event": "ready" | "progress" |
"sent" | "complete" | "final" | "error"}).  ``node`` builds the worker's
node from its spec and reads what the events report of it; ``sender``,
``receiver`` and ``logger`` are the three roles' loops.
"""
