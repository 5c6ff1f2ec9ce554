"""The worker processes of a stress run, seen from the orchestrator: each
one started (inside the run's namespace, or its own host's, if it has one)
with its stderr in the work directory, its JSON-line events read on a
thread onto one queue for the whole group, and commands written to its
stdin."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

from rpbcast.tools import netns

WORKER = "rpbcast.tools.stress.worker"


class WorkerProcess:
    """One worker; its events go to `events`, tagged {"_proc": name}, and
    its exit is an event too."""

    def __init__(self, name, argv, events, log_path):
        self.name = name
        self.log = open(log_path, "w")
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                  text=True, bufsize=1)
        self.events = events
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            ev["_proc"] = self.name
            self.events.put(ev)
        self.events.put({"event": "exit", "_proc": self.name, "code": self.p.wait()})

    def send(self, **cmd):
        try:
            self.p.stdin.write(json.dumps(cmd) + "\n")
            self.p.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def kill(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()

    def pause(self, stop: bool):
        """SIGSTOP (stop) or SIGCONT the worker: it neither runs nor reads
        its sockets meanwhile, as a process the machine does not schedule."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGSTOP if stop else signal.SIGCONT)


class Group:
    """The run's workers by node id, and the queue all their events
    arrive on."""

    def __init__(self, work, ns=None):
        """ns: the namespace every worker runs in, or {node id: namespace}
        (a host each), or None."""
        self.work = work
        self.ns = ns
        self.events = queue.Queue()
        self.procs = {}
        self.ready = {}             # node id -> its last "ready" event

    def spawn(self, i, role, spec):
        """Start node i's worker (a restart replaces the old one)."""
        argv = [sys.executable, "-m", WORKER, json.dumps(spec)]
        ns = self.ns.get(i) if isinstance(self.ns, dict) else self.ns
        if ns:
            argv = netns.exec_argv(ns, argv)
        self.procs[i] = WorkerProcess(f"{role}{i}", argv, self.events, os.path.join(self.work, f"{role}{i}.err"))

    def next_event(self, timeout):
        """The next event, or None after `timeout` seconds without one."""
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def wait_ready(self, errors, timeout=30.0) -> bool:
        """Wait until every worker said it is ready; the first error or exit
        ends the wait (appended to errors)."""
        ready = set()
        deadline = time.time() + timeout
        while len(ready) < len(self.procs) and time.time() < deadline:
            ev = self.next_event(0.5)
            if ev is None:
                continue
            if ev["event"] == "ready":
                ready.add(ev["id"])
                self.ready[ev["id"]] = ev
            elif ev["event"] in ("error", "exit"):
                errors.append(ev)
                break
        return not errors and len(ready) == len(self.procs)

    def send(self, ids, **cmd):
        for i in ids:
            self.procs[i].send(**cmd)

    def stop(self, errors, timeout=20.0) -> dict:
        """Tell every worker to stop and collect their final reports, by
        node id; error events are appended to errors."""
        for p in self.procs.values():
            p.send(cmd="stop")
        finals = {}
        deadline = time.time() + timeout
        while len(finals) < len(self.procs) and time.time() < deadline:
            ev = self.next_event(0.5)
            if ev is None:
                continue
            if ev["event"] == "final":
                finals[ev["id"]] = ev
            elif ev["event"] == "error":
                errors.append(ev)
        self.finished = set(finals)
        return finals

    def reap(self, grace=15.0):
        """Workers close their trace files and write counters after their
        final report: let them exit on their own first, then kill the rest.
        One that never sent its final report (hung) gets only a second."""
        finished = getattr(self, "finished", None)
        for i, p in self.procs.items():
            if finished is not None and i not in finished:
                try:
                    p.p.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    p.kill()
        end = time.time() + grace
        for p in self.procs.values():
            try:
                p.p.wait(timeout=max(0.1, end - time.time()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs.values():
            if p.p.poll() is None:
                p.kill()
