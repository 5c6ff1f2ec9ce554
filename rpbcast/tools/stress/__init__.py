"""`rpbcast stress`: the main job.

Starts a group on this host -- S senders, N receivers and L loggers, each a
separate process -- sends at a target or the maximum rate for T seconds with
injected loss, checks that every receiver delivered every message exactly
once, and prints a summary (msgs/s, MB/s, one-way latency percentiles,
repairs by peers vs loggers, overhead bytes per data byte).

With root it runs inside a network namespace it creates (loopback multicast,
kernel loss from an iptables `statistic` rule); without root it falls back to
unicast fan-out on 127.0.0.1 with in-process loss.

The pieces, in the order a run uses them: ``cli`` (the options and their
checks), ``plan`` (the group: ids, addresses, transport, each worker's
spec), ``processes`` (the worker processes and their events), ``run`` (the
run supervised: start, progress, killing and restarting a receiver, the
expectation, stop), ``report`` (the summary as text or JSON, run.json) and,
in every worker process, ``worker`` with the receivers' ``tally``.
"""
