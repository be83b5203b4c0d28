#!/usr/bin/env python3
"""How long a killed ps keeps a loopback daemon cluster from training, and what durability costs.

Runs the same job on 127.0.0.1 (one coordinator, two ps, two workers, --insecure) over each store:
memory (the baseline), rocksdb and tiered (both under the default --durability log), and with
--durability replicated:2 over memory (replicated) and over the tiered store (replicated-tiered:
memory with RocksDB as its capacity tier), and with --durability replicated:3 over memory on three
ps (replicated-3: each shard keeps a backup after the failover). For each it prints the uninterrupted job's samples/s as
a ratio to the memory store's on the same daemons;
for rocksdb and tiered it runs the job again with ps 1 killed with SIGKILL partway and started
again at once with the same flags (what systemd does), and prints the time from the kill to the
coordinator's "has resumed shards", the time from the kill back to full throughput, and the wall
time the crash added to the job, each also as a fraction of the uninterrupted job's wall time
measured in the same run. For the replicated stores ps 1 is killed and not started again: the
other ps promotes its backup of ps 1's shard (failover), and "kill to resumed" is the time to the
coordinator's "serves shards"; the part of it after the coordinator declared ps 1 lost (the
heartbeat timeout, --heartbeat-timeout-ms, 3 s by default) is printed as "promotion". With
--stop term ps 1 gets SIGTERM instead, drains, leaves and exits 0. Replicated, that is a ps
removed mid-job: the coordinator fails it over at once, and "promotion" is the time from the
coordinator's "left" to its "serves shards". Over rocksdb and tiered it is a supervisor's restart
(a rolling upgrade): the ps is started again as soon as it has exited, the coordinator waits for
it as for a crashed one, and "drain" is the time from the SIGTERM to its exit.

Time back to full throughput is read as `colony sim` reads it (sim/throughput_recovery.h): the
workers' timelines (`--timeline`) give when each step's computation ended; the last 20 steps of
each worker before the kill took a span W; full throughput is back at the first step after the
kill that starts as many consecutive steps taking at most W / 0.95.

    scripts/recovery_time.py [--colony build/colony] [--rows 200000] [--epochs 4]
                             [--store memory] [--store rocksdb] [--store tiered]
                             [--store replicated] [--store replicated-tiered]
                             [--store replicated-3]
                             [--heartbeat-timeout-ms 3000] [--kill-after 1.0]
                             [--stop kill|term]

Timings are of this machine at this moment: compare the ratios, not the seconds.
"""
import json
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def start(argv, log):
    return subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def await_line(log, pattern, proc=None, timeout=120.0):
    deadline = time.monotonic() + timeout
    rx = re.compile(pattern)
    while time.monotonic() < deadline:
        with open(log) as f:
            m = rx.search(f.read())
        if m:
            return m
        if proc is not None and proc.poll() is not None:
            sys.exit(f"{log}: exited ({proc.returncode}) before /{pattern}/")
        time.sleep(0.005)
    sys.exit(f"{log}: no /{pattern}/ within {timeout} s")


def time_back(step_ends, crash, window, fraction=0.95):
    """Seconds from `crash` to full throughput, or None: sim/throughput_recovery.cpp's rule."""
    ends = sorted(step_ends)
    after = next((i for i, t in enumerate(ends) if t > crash), len(ends))
    if after < window:
        return None
    allowed = (ends[after - 1] - ends[after - window]) / fraction
    for i in range(after, len(ends) - window + 1):
        if ends[i + window - 1] - ends[i] <= allowed:
            return ends[i] - crash
    return None


def step_ends(timeline):
    """Wall-clock times (s) at which a worker's steps were computed, from its --timeline."""
    with open(timeline) as f:
        doc = json.load(f)
    origin = doc["otherData"]["origin_unix_ns"] / 1e9
    return [origin + (e["ts"] + e["dur"]) / 1e6 for e in doc["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") == "compute"
            and e.get("args", {}).get("role") == "worker"]


def run_job(colony, work, data, store, epochs, kill_after, timeout_ms, stop="kill"):
    """Returns (wall seconds, seconds from kill to resumed or None, seconds from kill back to full
    throughput or None, samples/s reported, promotion seconds or None, drain seconds or None)."""
    tag = f"{store}-{'kill' if kill_after else 'plain'}"
    logs = os.path.join(work, tag)
    os.makedirs(logs)
    store_root = os.path.join(logs, "store")
    replicas = 3 if store == "replicated-3" else 2 if store.startswith("replicated") else 1
    n_ps = max(2, replicas)
    coord = start([colony, "coordinator", "--listen", "tcp://127.0.0.1:*", "--insecure",
                   "--shards", str(n_ps), "--workers", "2", "--epochs", str(epochs), "--no-cache",
                   "--heartbeat-ms", "200", "--heartbeat-timeout-ms", str(timeout_ms),
                   "--test", os.path.join(data, "test.libsvm")]
                  + (["--durability", f"replicated:{replicas}"] if replicas > 1 else [])
                  + ["--report", os.path.join(logs, "report.json")], os.path.join(logs, "c.log"))
    endpoint = await_line(os.path.join(logs, "c.log"),
                          r"coordinator listening on (tcp://[0-9.]+:[0-9]+)", coord).group(1)
    began = time.monotonic()

    def ps_argv(i, listen):
        a = [colony, "ps", "--coordinator", endpoint, "--listen", listen, "--insecure",
             "--store", "memory" if store in ("memory", "replicated", "replicated-3")
             else f"rocksdb:{store_root}-{i}"]
        if store.endswith("tiered"):
            a += ["--cache-bytes", "100000000"]
        return a

    ps = [start(ps_argv(i, "tcp://127.0.0.1:*"), os.path.join(logs, f"ps{i}.log"))
          for i in range(n_ps)]
    ps1_endpoint = await_line(os.path.join(logs, "ps1.log"),
                              r"ps listening on (tcp://[0-9.]+:[0-9]+)", ps[1]).group(1)
    timelines = [os.path.join(logs, f"w{i}-timeline.json") for i in range(2)]
    workers = [start([colony, "worker", "--coordinator", endpoint, "--listen", "tcp://127.0.0.1:*",
                      "--insecure", "--data", os.path.join(data, "train.libsvm")]
                     + (["--timeline", timelines[i]] if kill_after else []),
                     os.path.join(logs, f"w{i}.log")) for i in range(2)]
    resumed = back = promotion = drain = None
    if kill_after:
        await_line(os.path.join(logs, "w0.log"), "training starts", workers[0])
        time.sleep(kill_after)
        killed = time.monotonic()
        killed_unix = time.time()
        replicated = store.startswith("replicated")
        ps[1].send_signal(signal.SIGTERM if stop == "term" else signal.SIGKILL)
        if replicated:  # failover: another ps takes over, ps 1 stays down
            await_line(os.path.join(logs, "c.log"),
                       r"left \(stopped by SIGTERM\)" if stop == "term" else "was lost", coord)
            declared = time.monotonic()
            await_line(os.path.join(logs, "c.log"), "serves shards", coord)
            promotion = time.monotonic() - declared
            if ps[1].wait() != 0 and stop == "term":
                sys.exit(f"{tag}: ps 1 did not leave cleanly; logs in {logs}")
            ps = ps[:1] + ps[2:]
        else:  # a restart in place over the store on disk
            if ps[1].wait() != 0 and stop == "term":
                sys.exit(f"{tag}: ps 1 did not leave cleanly; logs in {logs}")
            drain = time.monotonic() - killed
            ps[1] = start(ps_argv(1, ps1_endpoint), os.path.join(logs, "ps1-again.log"))
            await_line(os.path.join(logs, "c.log"), "has resumed shards", coord)
        resumed = time.monotonic() - killed
    for p in [coord] + ps + workers:
        if p.wait(timeout=600) != 0:
            sys.exit(f"{tag}: a process failed; logs in {logs}")
    if kill_after:
        back = time_back(step_ends(timelines[0]) + step_ends(timelines[1]), killed_unix, 40)
    with open(os.path.join(logs, "report.json")) as f:
        sps = json.load(f)["samples_per_sec"]
    return time.monotonic() - began, resumed, back, sps, promotion, drain


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--colony", default="build/colony")
    ap.add_argument("--rows", type=int, default=200000)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--kill-after", type=float, default=1.0,
                    help="seconds of training before the kill")
    ap.add_argument("--heartbeat-timeout-ms", type=int, default=3000,
                    help="how long a silent member lives (the coordinator's flag)")
    ap.add_argument("--stop", choices=["kill", "term"], default="kill",
                    help="how ps 1 is stopped: SIGKILL or SIGTERM")
    ap.add_argument("--store", action="append",
                    choices=["memory", "rocksdb", "tiered", "replicated", "replicated-tiered",
                             "replicated-3"])
    a = ap.parse_args()
    stores = a.store or ["memory", "rocksdb", "tiered"]
    colony = os.path.abspath(a.colony)
    work = tempfile.mkdtemp(prefix="colony-recovery-")
    data = os.path.join(work, "data")
    subprocess.run([colony, "gen", "--rows", str(a.rows), "--test-rows", "20000", "--seed", "1",
                    "--out", data], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    print(f"{'store':17} {'samples/s':>10} {'of memory':>10} {'kill to resumed':>16} {'of job':>8} "
          f"{'back to full':>13} {'time added':>11} {'of job':>8} {'promotion':>10} "
          f"{'drain':>8}")
    memory_sps = None
    for store in stores:
        plain, _, _, sps, _, _ = run_job(colony, work, data, store, a.epochs, 0,
                                      a.heartbeat_timeout_ms)
        if store == "memory":
            memory_sps = sps
        ratio = f"{sps / memory_sps:10.3f}" if memory_sps else f"{'-':>10}"
        # A memory ps that dies takes its rows with it: the job fails.
        if store == "memory":
            print(f"{store:17} {sps:10.0f} {ratio}")
            continue
        killed, resumed, back, _, promotion, drain = run_job(
            colony, work, data, store, a.epochs, a.kill_after, a.heartbeat_timeout_ms, a.stop)
        back_text = f"{back:12.3f}s" if back is not None else f"{'not back':>13}"
        promotion_text = f"{promotion:9.3f}s" if promotion is not None else f"{'-':>10}"
        drain_text = f"{drain:7.3f}s" if drain is not None and a.stop == "term" else f"{'-':>8}"
        print(f"{store:17} {sps:10.0f} {ratio} {resumed:15.3f}s {resumed / plain:8.3f} "
              f"{back_text} {killed - plain:10.3f}s {(killed - plain) / plain:8.3f} "
              f"{promotion_text} {drain_text}")
    print(f"one run each ({a.rows} rows, {a.epochs} epochs, 2 ps (3 for replicated-3), 2 workers, "
          "loopback); "
          "'of job' is a fraction of the uninterrupted job's wall time in the same run")
    shutil.rmtree(work, ignore_errors=True)  # kept, with every log, when a run fails


if __name__ == "__main__":
    main()
