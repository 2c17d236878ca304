#!/usr/bin/python3
"""Data-parallel runs on a real single-node Slurm cluster on 127.0.0.1.

  tst_slurm.py TRAINBENCH_CLI

Debian's slurmctld and slurmd run in the foreground as this test's own
children (AuthType=auth/none, no munge), with a configuration written here:
cred_expire=10 and sched_interval=2 bring a requeue down to seconds.

Cases: `trainbench-cli slurm` refuses bad arguments with one sentence each
and writes a script sbatch accepts; a 2-task job submitted with --submit
completes, and its run trained with world size 2 and the loss sequence of
one process at twice the batch; a running job signalled with SIGUSR1 (what
--signal=USR1@120 sends before the time limit) checkpoints, requeues itself
and resumes the same run: the run finishes once, with every step stored
exactly once and the losses of an uninterrupted run; a sweep submitted as
a job array (slurm --sweep) trains each of its trials once, two at a time.
"""
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

CLI = None
TMP = None
ENV = None
failures = []


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Slurm:
    def __init__(self, folder):
        self.folder = folder
        host = socket.gethostname()
        for d in ("state", "spool"):
            os.makedirs(os.path.join(folder, d), exist_ok=True)
        self.conf = os.path.join(folder, "slurm.conf")
        cpus = os.cpu_count()
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=tbtest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/none
CredType=cred/none
AuthInfo=cred_expire=10
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobRequeue=1
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
        env = dict(ENV, SLURM_CONF=self.conf)
        self.env = env
        self.procs = [subprocess.Popen(["slurmctld", "-D", "-i", "-f", self.conf], env=env,
                                       stdout=subprocess.DEVNULL, stderr=open(os.path.join(folder, "ctld.err"), "w")),
                      subprocess.Popen(["slurmd", "-D", "-f", self.conf], env=env,
                                       stdout=subprocess.DEVNULL, stderr=open(os.path.join(folder, "d.err"), "w"))]
        deadline = time.time() + 30
        self.up = False
        while time.time() < deadline and not self.up:
            time.sleep(0.3)
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env).stdout
            self.up = "idle" in out
        if not self.up:
            for name in ("slurmctld.log", "slurmd.log", "ctld.err", "d.err"):
                p = os.path.join(folder, name)
                if os.path.exists(p):
                    print(f"--- {name}\n" + open(p).read()[-1500:])

    def job(self, job_id):
        out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, env=self.env).stdout
        fields = dict(re.findall(r"(\w+)=(\S*)", out))
        return fields

    def wait(self, job_id, states, timeout):
        deadline = time.time() + timeout
        fields = {}
        while time.time() < deadline:
            fields = self.job(job_id)
            if fields.get("JobState") in states:
                return fields
            time.sleep(0.5)
        return fields

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def write_config(name, batch, steps, **train):
    t = {"batch_size": batch, "steps": steps, "seed": 5, "precision": "fp32", "eval_every": 1000, "dist_timeout_s": 30}
    t.update(train)
    c = {"name": name, "device": "cpu",
         "model": {"type": "gpt", "n_layer": 2, "d_model": 64, "n_head": 4, "positional_encoding": "learned", "dropout": 0.0},
         "data": {"source": "addition", "digits": 3},
         "optim": {"optimizer": "adamw", "lr": 0.002, "warmup_steps": 5}, "train": t}
    path = os.path.join(TMP, name + ".json")
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def cli(*args, env=None, timeout=300):
    return subprocess.run([CLI, *args], capture_output=True, text=True, env=env or ENV, timeout=timeout)


def loss_rows(db, run):
    rows = [l.split(",") for l in cli("export", str(run), "--db", db).stdout.splitlines()[1:]]
    return [(int(r[1]), float(r[3])) for r in rows if len(r) >= 4 and r[2] == "loss"]


def runs(db):
    with sqlite3.connect(db) as c:
        return c.execute("SELECT id, status, steps_done, config_json FROM runs ORDER BY id").fetchall()


def main():
    global CLI, TMP, ENV
    CLI = os.path.abspath(sys.argv[1])
    if not shutil.which("slurmctld") or not shutil.which("sbatch"):
        print("slurmctld or sbatch missing: packaging/install-deps.sh --tests installs them")
        return 1
    TMP = tempfile.mkdtemp(prefix="tb-slurm-")
    ENV = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}

    # --- the script and its refusals, no cluster needed
    cfg = write_config("slurm-b4", 4, 60)
    for label, args, expect in [
        ("no --nodes", ["--tasks-per-node", "2"], "--nodes"),
        ("neither per-node count", ["--nodes", "1"], "--gpus-per-node"),
        ("both per-node counts", ["--nodes", "1", "--gpus-per-node", "2", "--tasks-per-node", "2"], "one of"),
        ("a time Slurm cannot read", ["--nodes", "1", "--tasks-per-node", "2", "--time", "2 hours"], "not a Slurm time"),
        ("a partition with a space", ["--nodes", "1", "--tasks-per-node", "2", "--partition", "a b"], "not a Slurm name"),
    ]:
        r = cli("slurm", "--config", cfg, "--output", os.path.join(TMP, "jobs"), *args)
        check(r.returncode == 2 and expect in r.stderr and r.stderr.count("\n") <= 2,
              f"slurm with {label}: one clear error ({r.stderr.strip()})")
    r = cli("slurm", "--config", cfg, "--nodes", "2", "--gpus-per-node", "4", "--partition", "gpu", "--time", "1-00:00:00",
            "--account", "proj", "--output", os.path.join(TMP, "gpujob"))
    script = open(os.path.join(TMP, "gpujob", "slurm-b4.sbatch")).read() if r.returncode == 0 else ""
    for line in ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --gpus-per-node=4", "#SBATCH --signal=USR1@120",
                 "#SBATCH --requeue", "#SBATCH --partition=gpu", "#SBATCH --time=1-00:00:00", "#SBATCH --account=proj"]:
        check(line in script, f"the GPU script has {line}")
    check(subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0, "the script is valid bash")

    slurm = Slurm(os.path.join(TMP, "cluster"))
    try:
        check(slurm.up, "a single-node Slurm came up on 127.0.0.1")
        if not slurm.up:
            return 1
        env = slurm.env
        jobs = os.path.join(TMP, "jobs")
        db = os.path.join(jobs, "experiments.db")

        # --- a 2-task job completes; its losses are one process's at batch 8
        r = cli("slurm", "--config", cfg, "--nodes", "1", "--tasks-per-node", "2", "--output", jobs, "--submit", env=env)
        m = re.search(r"submitted job ([0-9]+)", r.stdout)
        check(r.returncode == 0 and m, f"--submit prints the job id ({r.stdout.strip()} {r.stderr.strip()})")
        if not m:
            return 1
        fields = slurm.wait(m.group(1), ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"), 120)
        out = os.path.join(jobs, f"slurm-{m.group(1)}.out")
        check(fields.get("JobState") == "COMPLETED",
              f"the job completed ({fields.get('JobState')}; {open(out).read()[-400:] if os.path.exists(out) else ''})")
        rows = runs(db)
        check(len(rows) == 1 and rows[0][1] == "finished" and json.loads(rows[0][3])["train"].get("world_size") == 2,
              f"one run, finished, world size 2 ({[(r[0], r[1], r[2]) for r in rows]})")
        one = os.path.join(TMP, "one.db")
        cli("train", "--config", write_config("slurm-b8", 8, 60), "--db", one, "--quiet", "--threads", "1")
        a, b = [v for _, v in loss_rows(db, 1)], [v for _, v in loss_rows(one, 1)]
        d = max((abs(x - y) for x, y in zip(a, b)), default=float("inf")) if len(a) == len(b) else float("inf")
        check(len(a) == 60 and d <= 1e-5, f"its 60 losses are one process's at batch 8 (largest difference {d:.2e})")

        # --- SIGUSR1 to a running job: checkpoint, requeue, resume the same run
        steps = 1500
        long_cfg = write_config("requeue-b4", 4, steps, checkpoint_every=500)
        r = cli("slurm", "--config", long_cfg, "--nodes", "1", "--tasks-per-node", "2", "--output", jobs, "--submit", env=env)
        job = re.search(r"submitted job ([0-9]+)", r.stdout).group(1)
        run = None
        deadline = time.time() + 90
        while time.time() < deadline and run is None:
            time.sleep(0.3)
            rows = [x for x in runs(db) if json.loads(x[3])["name"] == "requeue-b4"]
            if rows and (rows[0][2] or 0) >= 300:
                run = rows[0][0]
        check(run is not None, "the long job trains")
        if run is None:
            return 1
        subprocess.run(["scancel", "--signal=USR1", job], env=env, check=False)
        signalled_at = time.time()
        fields = slurm.wait(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"), 240)
        log = open(os.path.join(jobs, f"slurm-{job}.out")).read()
        check(fields.get("JobState") == "COMPLETED" and fields.get("Restarts") == "1",
              f"the job was requeued once and completed ({fields.get('JobState')}, restarts {fields.get('Restarts')}, "
              f"{time.time() - signalled_at:.0f} s after SIGUSR1)")
        shown = "requeued Slurm job" in log and "start 1" in log
        check(shown, "the job's output shows the requeue and the second start" + ("" if shown else ":\n" + log[-1500:]))
        rows = [x for x in runs(db) if json.loads(x[3])["name"] == "requeue-b4"]
        check(len(rows) == 1 and rows[0][1] == "finished" and rows[0][2] == steps,
              f"the same run resumed and finished: no second run ({[(r[0], r[1], r[2]) for r in rows]})")
        with sqlite3.connect(db) as c:
            events = [e[0] for e in c.execute("SELECT message FROM events WHERE run_id = ? AND kind = 'start'", (run,))]
        check(len(events) == 2 and events[1].startswith("resumed at step"), f"it resumed, not restarted ({[e[:40] for e in events]})")
        got = loss_rows(db, run)
        check(sorted(s for s, _ in got) == list(range(1, steps + 1)), f"every step is stored exactly once ({len(got)} rows)")
        # The same 2 ranks uninterrupted (by --nproc here): over 1500 steps one
        # process at batch 8 drifts away by float rounding, the twin must not.
        ref = os.path.join(TMP, "ref.db")
        cli("train", "--config", long_cfg, "--db", ref, "--quiet", "--nproc", "2")
        a = [v for _, v in sorted(got)]
        b = [v for _, v in sorted(loss_rows(ref, 1))]
        d = max((abs(x - y) for x, y in zip(a, b)), default=float("inf")) if len(a) == len(b) else float("inf")
        check(d <= 1e-6, f"the requeued run's losses equal an uninterrupted 2-rank run's (largest difference {d:.2e})")

        # --- a sweep as a job array: each task plans and trains one trial
        grid = os.path.join(TMP, "grid.json")
        with open(grid, "w") as f:
            json.dump({"name": "array grid", "parameters": {"optim.lr": {"values": [0.003, 0.001, 0.0003]}}}, f)
        r = cli("slurm", "--config", cfg, "--nodes", "1", "--tasks-per-node", "1", "--output", jobs, "--sweep", grid,
                "--parallel", "2", "--submit", env=env)
        sweep = re.search(r"sweep ([0-9]+): 3 trials", r.stdout)
        job = re.search(r"submitted job ([0-9]+)", r.stdout)
        script = open(os.path.join(jobs, "array_grid.sbatch")).read() if r.returncode == 0 else ""
        check(r.returncode == 0 and sweep and job and "#SBATCH --array=1-3%2" in script,
              f"slurm --sweep stores the sweep and submits a job array ({r.stdout.strip()} {r.stderr.strip()})")
        status = None
        deadline = time.time() + 180
        while sweep and time.time() < deadline:
            time.sleep(1)
            with sqlite3.connect(db) as c:
                row = c.execute("SELECT status FROM sweeps WHERE id = ?", (int(sweep.group(1)),)).fetchone()
                trials = c.execute("SELECT status, run_id FROM sweep_trials WHERE sweep_id = ? ORDER BY trial",
                                   (int(sweep.group(1)),)).fetchall()
            status = row[0] if row else None
            if status == "finished":
                break
        check(status == "finished" and len(trials) == 3 and all(t[0] == "finished" and t[1] for t in trials)
              and len({t[1] for t in trials}) == 3,
              f"every array task trained its trial once ({status}, {trials})")
    finally:
        slurm.stop()
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
