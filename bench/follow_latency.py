#!/usr/bin/python3
"""Follow latency of a remote run, over a real sshd on loopback.

  bench/follow_latency.py TRAINBENCH_CLI [--points N]

A writer (this script) commits one metric point every 100 ms into a run of a
"remote" store, owning the run as a trainer would (its pid is the owner).
`trainbench-cli follow RUN --host H --jsonl` runs on the desktop side. For
each point: the time from its commit to its line arriving here (same clock).
Then, with nothing written for 20 s, the socket writes of the ssh client per
second (from /proc/PID/io: every round trip needs one), and the time from a
killed ssh client (a dropped link; the server stays up, so the link is back
at once) to the follow being current again. Local follow (no ssh) for scale.
"""
import getpass
import json
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from sshd_fixture import Sshd, children  # noqa: E402


def process_start(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[19]


def own_run(db):
    """A running run owned by this process, as a trainer's would be."""
    pid = os.getpid()
    with sqlite3.connect(db) as c:
        cur = c.execute(
            "INSERT INTO runs(name, status, created_at, config_json, steps_total, owner_pid, owner_start, owner_host, "
            "owner_pidns, heartbeat_at) VALUES('latency', 'running', ?, '{}', 100000, ?, ?, ?, ?, ?)",
            (time.time(), pid, process_start(pid), socket.gethostname(), os.readlink("/proc/self/ns/pid"), time.time()))
        return cur.lastrowid


def write_point(c, run, step):
    now = time.time()
    c.execute("INSERT INTO metrics(run_id, key, step, value, wall_time) VALUES(?, 'loss', ?, ?, ?)", (run, step, 1.0 / step, now))
    c.execute("INSERT INTO latest_metrics(run_id, key, step, value, wall_time) VALUES(?, 'loss', ?, ?, ?) "
              "ON CONFLICT(run_id, key) DO UPDATE SET step=excluded.step, value=excluded.value, wall_time=excluded.wall_time",
              (run, step, 1.0 / step, now))
    c.execute("UPDATE runs SET steps_done=?, heartbeat_at=? WHERE id=?", (step, now, run))
    c.commit()
    return time.time()


class Reader(threading.Thread):
    def __init__(self, proc):
        super().__init__(daemon=True)
        self.proc = proc
        self.arrived = {}

    def run(self):
        for line in self.proc.stdout:
            t = time.time()
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("type") == "metric":
                self.arrived[r["step"]] = t


def wait_for(reader, step, timeout=30):
    deadline = time.time() + timeout
    while step not in reader.arrived and time.time() < deadline:
        time.sleep(0.002)
    return reader.arrived.get(step)


def measure(cli, env, follow_args, db, run, points, label, idle_and_reconnect):
    c = sqlite3.connect(db)
    proc = subprocess.Popen([cli, "follow", str(run), "--jsonl", *follow_args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    reader = Reader(proc)
    reader.start()
    step = 1
    wait_for(reader, step) if write_point(c, run, step) else None
    latencies = []
    for _ in range(points):
        step += 1
        committed = write_point(c, run, step)
        arrived = wait_for(reader, step)
        if arrived:
            latencies.append(arrived - committed)
        time.sleep(0.1)
    latencies.sort()
    print(f"{label}: commit-to-arrival over {len(latencies)} points: median {1000 * statistics.median(latencies):.0f} ms, "
          f"p95 {1000 * latencies[int(0.95 * len(latencies))]:.0f} ms, max {1000 * latencies[-1]:.0f} ms", flush=True)
    if idle_and_reconnect:
        ssh = children(proc.pid)[0]

        def writes(pid):
            with open(f"/proc/{pid}/io") as f:
                return int(dict(line.split(": ") for line in f.read().splitlines())["syscw"])
        before = writes(ssh)
        time.sleep(20)
        idle = (writes(ssh) - before) / 20
        print(f"{label}: idle, the ssh client made {idle:.2f} writes per second (a round trip needs at least one)",
              flush=True)
        times = []
        for _ in range(5):
            ssh = children(proc.pid)[0]
            killed = time.time()
            os.kill(ssh, 9)
            step += 1
            write_point(c, run, step)
            arrived = wait_for(reader, step)
            if arrived:
                times.append(arrived - killed)
            time.sleep(0.5)
        print(f"{label}: from a dropped link (ssh client killed, server up) to current again: "
              f"{', '.join(f'{t:.2f}' for t in times)} s", flush=True)
    c.execute("UPDATE runs SET status='finished', owner_pid=NULL WHERE id=?", (run,))
    c.commit()
    proc.wait(timeout=30)


def main():
    cli = os.path.abspath(sys.argv[1])
    points = int(sys.argv[sys.argv.index("--points") + 1]) if "--points" in sys.argv else 200
    with tempfile.TemporaryDirectory(prefix="tb-follow-") as tmp:
        env = dict(os.environ, XDG_CONFIG_HOME=f"{tmp}/config")
        sshd = Sshd(tmp)
        try:
            db = f"{tmp}/remote.db"
            # A store with its schema: one 1-step run.
            config = {"device": "cpu", "model": {"type": "gpt", "n_layer": 1, "d_model": 32, "n_head": 2},
                      "data": {"source": "addition", "digits": 2}, "train": {"batch_size": 8, "steps": 1}}
            with open(f"{tmp}/c.json", "w") as f:
                json.dump(config, f)
            subprocess.run([cli, "train", "--config", f"{tmp}/c.json", "--db", db, "--quiet"], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            subprocess.run([cli, "hosts", "add", "bench", f"{getpass.getuser()}@127.0.0.1:{sshd.port}", "--remote-cli", cli,
                            "--remote-db", db, "--ssh-options", sshd.ssh_options(f"{tmp}/known_hosts"),
                            "--accept-new-host-key"], env=env, check=True, stdout=subprocess.DEVNULL)
            measure(cli, env, ["--db", db], db, own_run(db), points, "local follow", False)
            measure(cli, env, ["--host", "bench"], db, own_run(db), points, "remote follow over ssh", True)
        finally:
            sshd.stop()


if __name__ == "__main__":
    main()
