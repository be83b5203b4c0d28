#!/usr/bin/env python3
"""Sweep training settings on validation data and compare them with the defaults.

Usage: scripts/sweep_defaults.py --colony build/colony --model fm|deepfm
           --data NAME=TRAIN,VALID [--data ...] [--grid quick|full] [--out results.tsv]

Each --data names a data set by its training file and its validation file; the test split of a
data set is never read. `--data gen=TRAIN,holdout` trains with `--valid-fraction 0.1` and
scores the held-out rows of TRAIN (data/holdout.h) instead of a file.

For every setting of the grid and every data set the script runs `colony train --engine local`
once and reads its report. It prints, per data set, the best setting, the defaults' AUC and
the gap, and writes every run to --out (tab-separated). Runs are independent and sequential:
on a shared machine the AUCs do not depend on the load, only the times do.
"""
import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile

# Sparse optimizer settings: (name, flags). The defaults are marked by the empty flag list.
SPARSE = {
    "quick": [
        ("ftrl a0.05 l1=l2=1", "--optimizer ftrl --lr 0.05 --l1 1 --l2 1"),
        ("ftrl a0.1 l1=l2=1", "--optimizer ftrl --lr 0.1 --l1 1 --l2 1"),
        ("ftrl a0.05 l1=l2=20", "--optimizer ftrl --lr 0.05 --l1 20 --l2 20"),
        ("adagrad 0.05", "--optimizer adagrad --lr 0.05"),
        ("adam 0.001", "--optimizer adam --lr 0.001"),
        ("adam 0.003", "--optimizer adam --lr 0.003"),
    ],
    "full": [
        ("ftrl a0.05 l1=l2=0.1", "--optimizer ftrl --lr 0.05 --l1 0.1 --l2 0.1"),
        ("ftrl a0.05 l1=l2=1", "--optimizer ftrl --lr 0.05 --l1 1 --l2 1"),
        ("ftrl a0.05 l1=l2=5", "--optimizer ftrl --lr 0.05 --l1 5 --l2 5"),
        ("ftrl a0.05 l1=l2=20", "--optimizer ftrl --lr 0.05 --l1 20 --l2 20"),
        ("ftrl a0.1 l1=l2=1", "--optimizer ftrl --lr 0.1 --l1 1 --l2 1"),
        ("ftrl a0.2 l1=l2=1", "--optimizer ftrl --lr 0.2 --l1 1 --l2 1"),
        ("adagrad 0.02", "--optimizer adagrad --lr 0.02"),
        ("adagrad 0.05", "--optimizer adagrad --lr 0.05"),
        ("adagrad 0.1", "--optimizer adagrad --lr 0.1"),
        ("adam 0.001", "--optimizer adam --lr 0.001"),
        ("adam 0.003", "--optimizer adam --lr 0.003"),
        ("adam 0.01", "--optimizer adam --lr 0.01"),
    ],
}
# FTRL's regularisation in finer steps (the FM defaults' neighbourhood).
SPARSE["ftrl"] = [("ftrl a%g l1=%g l2=%g" % (a, l1, l2), "--optimizer ftrl --lr %g --l1 %g --l2 %g" % (a, l1, l2))
                  for a in (0.05, 0.1) for l1 in (0, 1) for l2 in (1, 5, 20, 50)]
# The sparse settings for the deep models' sweep: the FM sweep's best and the old defaults.
SPARSE["deep"] = [
    ("ftrl a0.1 l1=1 l2=1", "--optimizer ftrl --lr 0.1 --l1 1 --l2 1"),
    ("ftrl a0.05 l1=20 l2=20", "--optimizer ftrl --lr 0.05 --l1 20 --l2 20"),
    ("adagrad 0.05", "--optimizer adagrad --lr 0.05"),
    ("adam 0.003", "--optimizer adam --lr 0.003"),
]
# Model-specific axes: list of (name, flags) per axis.
MODEL_AXES = {
    "fm": [[("dim 8", "--dim 8"), ("dim 16", "--dim 16"), ("dim 32", "--dim 32")]],
    "deepfm": [
        [("dim 8", "--dim 8"), ("dim 16", "--dim 16")],
        [("dense adam 0.001", "--dense-lr 0.001"), ("dense adam 0.003", "--dense-lr 0.003")],
    ],
}


def run(colony, model, flags, train, valid, seed, workdir):
    report = os.path.join(workdir, "r.json")
    if valid == "holdout":
        data = ["--data", train, "--test", train, "--valid-fraction", "0.1", "--patience", "0"]
    else:
        data = ["--data", train, "--test", valid]
    cmd = [colony, "train", "--engine", "local", "--model", model, "--seed", str(seed),
           "--report", report] + data + flags.split()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), done.stderr[-2000:]))
    with open(report) as f:
        r = json.load(f)
    key = "valid" if valid == "holdout" else "test"  # --test is the validation file here
    return r[key + "_logloss"], r[key + "_auc"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--colony", default="build/colony")
    ap.add_argument("--model", required=True, choices=sorted(MODEL_AXES))
    ap.add_argument("--data", action="append", required=True, help="NAME=TRAIN,VALID|holdout")
    ap.add_argument("--grid", default="quick", choices=sorted(SPARSE))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    sets = []
    for d in a.data:
        name, files = d.split("=", 1)
        train, valid = files.split(",", 1)
        sets.append((name, train, valid))
    axes = [SPARSE[a.grid]] + MODEL_AXES[a.model]
    settings = [("defaults", "")]
    for combo in itertools.product(*axes):
        settings.append((", ".join(n for n, _ in combo), " ".join(f for _, f in combo)))
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, train, valid in sets:
            for label, flags in settings:
                ll, auc = run(a.colony, a.model, flags, train, valid, a.seed, work)
                rows.append((name, label, flags, ll, auc))
                print("%-10s %-45s logloss %.5f  auc %.4f" % (name, label, ll, auc), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write("data\tsetting\tflags\tvalid_logloss\tvalid_auc\n")
            for r in rows:
                f.write("%s\t%s\t%s\t%.6f\t%.6f\n" % r)
    print()
    for name, _, _ in sets:
        mine = [r for r in rows if r[0] == name]
        best = max(mine, key=lambda r: r[4])
        default = next(r for r in mine if r[1] == "defaults")
        print("%s: best %s (auc %.4f, logloss %.5f); defaults auc %.4f, logloss %.5f; gap %.4f"
              % (name, best[1], best[4], best[3], default[4], default[3], best[4] - default[4]))


if __name__ == "__main__":
    main()
