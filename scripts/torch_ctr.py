#!/usr/bin/python3
"""PyTorch reference DeepFM and DLRM, the peer of `colony bench train --model deepfm|dlrm`.

The same models as Colony's models/deep.cpp (docs/models.md), on the same files:
  * input: Criteo TSV (label, 13 integer columns -> log1p, negatives mirrored, 0 when missing;
    26 hex categorical columns, missing = no feature) or libffm (`label field:index[:value]`);
  * one embedding row per (field, value), from a vocabulary built over the training then the
    test file (a test-only value gets a row that is initialised but never trained, as Colony's
    lazily created rows are), or `--hash-buckets N` rows per field; row 0 is an all-zero
    padding row standing for "no feature";
  * a field's embedding is the sum of v_k x_k over its features (0 when it has none);
  * DeepFM rows are [w, v_1..v_d] and the 13 dense features have rows of their own in the FM
    part: z = b0 + sum w_k x_k + FM2(all features) + MLP([e_1..e_F, u]);
  * DLRM rows are [v]: b = bottom(u) (ReLU throughout, output d), Z = [b, e_1..e_F],
    z = b0 + top([b, <Z_i, Z_j> for i < j]);
  * init: embeddings uniform with std 0.01, linear weights 0, dense layers Glorot uniform
    with zero biases; sparse gradients summed over the batch, dense ones averaged;
  * optimizers: dense layers torch.optim.Adam; embeddings (sparse gradients) torch.optim.Adagrad,
    which is Colony's `--optimizer adagrad` (accumulator from 1e-6), or SparseAdam, whose bias
    correction counts global steps where Colony's counts each row's own updates.
Only the training loop (forward, backward, optimizer steps, per batch, file order) is timed.
Progress goes to stderr; the last stdout line is one JSON object with the results.
"""
import argparse
import ctypes
import json
import math
import os
import sys
import time
import zlib

# Debian's torch runs its own ops on an OpenMP (GOMP) pool and its matrix products on
# OpenBLAS's pthread pool. Both spin while idle, so with both at N threads on N cores each
# pool's threads steal the other's cores: on the 2-core dev machine 2+2 threads ran at half
# the speed of 1+1. Hence --threads sizes OpenBLAS (nearly all the FLOPs) and --omp-threads
# (default 1) torch's pool, whose threads sleep when idle (read when torch loads libgomp).
os.environ.setdefault('OMP_WAIT_POLICY', 'PASSIVE')

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CRITEO_INT, CRITEO_CAT = 13, 26
CHUNK = 65536  # lines parsed into Python lists before they become numpy arrays


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Vocab:
    """Row ids per field: local ids 1.. (0 = missing), made global by `finish`."""

    def __init__(self, hash_buckets):
        self.buckets = hash_buckets
        self.fields = []  # per field: dict token -> local id (vocabulary mode)

    def local(self, field, token):
        if self.buckets:
            return 1 + zlib.crc32(token.encode()) % self.buckets
        while field >= len(self.fields):
            self.fields.append({})
        d = self.fields[field]
        return d.setdefault(token, len(d) + 1)

    def finish(self, nfields, first):
        """Global row of local id 1 of each field, and the table size; rows [1, first) are
        the dense features' rows (DeepFM)."""
        sizes = [self.buckets if self.buckets else
                 (len(self.fields[f]) if f < len(self.fields) else 0) for f in range(nfields)]
        base = first + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        return base, int(first + sum(sizes))


def dense_transform(raw):
    """Colony's Criteo dense feature: log(1+n), -log(1+|n|) for n < 0, 0 when missing."""
    raw = raw.astype(np.float64)
    return (np.sign(raw) * np.log1p(np.abs(raw))).astype(np.float32)


def load_criteo(path, vocab):
    labels, dense, local = [], [], []
    with open(path) as f:
        while True:
            lines = f.readlines(CHUNK * 128)
            if not lines:
                break
            lab, den, cat = [], [], []
            for line in lines:
                t = line.rstrip('\r\n').split('\t')
                if len(t) != 1 + CRITEO_INT + CRITEO_CAT:
                    sys.exit(f'{path}: {len(t)} tab-separated fields, expected 40')
                lab.append(t[0] == '1')
                den.append([int(x) if x else 0 for x in t[1:1 + CRITEO_INT]])
                # Colony keys on the parsed hex value; Criteo tokens are fixed-width hex, so
                # the string is the same key.
                cat.append([vocab.local(j, x) if x else 0
                            for j, x in enumerate(t[1 + CRITEO_INT:])])
            labels.append(np.array(lab, np.float32))
            dense.append(dense_transform(np.array(den, np.int64)))
            local.append(np.array(cat, np.int64))
    return np.concatenate(labels), np.concatenate(dense), np.concatenate(local), None


def load_libffm(path, vocab):
    """Returns per-sample lists of (field, local id, value); padded by `pad_libffm`."""
    labels, samples = [], []
    with open(path) as f:
        for line in f:
            t = line.split()
            if not t:
                continue
            labels.append(1.0 if float(t[0]) == 1.0 else 0.0)  # 0/1 or -1/+1
            feats = []
            for tok in t[1:]:
                p = tok.split(':')
                feats.append((int(p[0]), vocab.local(int(p[0]), str(int(p[1]))),
                              float(p[2]) if len(p) > 2 else 1.0))
            samples.append(feats)
    return np.array(labels, np.float32), np.zeros((len(labels), 0), np.float32), None, samples


def pad_libffm(samples, nfields, k):
    """(n, F*K) local ids and values, K slots per field (0 / 0.0 where unused)."""
    ids = np.zeros((len(samples), nfields, k), np.int64)
    val = np.zeros((len(samples), nfields, k), np.float32)
    for i, feats in enumerate(samples):
        used = [0] * nfields
        for f, r, v in feats:
            ids[i, f, used[f]], val[i, f, used[f]] = r, v
            used[f] += 1
    return ids.reshape(len(samples), -1), val.reshape(len(samples), -1)


def load(args):
    """Both files as tensors: labels, dense u, global row ids (n, F*K) and values (or None)."""
    vocab = Vocab(args.hash_buckets)
    reader = load_criteo if args.format == 'criteo' else load_libffm
    parts = [reader(path, vocab) for path in (args.train, args.test)]
    if args.format == 'criteo':
        nfields, k = CRITEO_CAT, 1
    else:
        every = [s for p in parts for s in p[3]]
        nfields = 1 + max((f for s in every for f, _, _ in s), default=0)
        k = max((np.bincount([f for f, _, _ in s]).max() for s in every if s), default=1)
    ndense = parts[0][1].shape[1]
    first = 1 + (ndense if args.model == 'deepfm' else 0)
    base, rows = vocab.finish(nfields, first)
    out = []
    for labels, dense, local, samples in parts:
        val = None
        if samples is not None:
            local, val = pad_libffm(samples, nfields, k)
            if np.all(val[local > 0] == 1.0):
                val = None  # implicit values: the padding row already makes missing ones 0
        field = np.repeat(np.arange(nfields), k)
        ids = np.where(local > 0, base[field] + local - 1, 0)
        out.append((torch.from_numpy(labels), torch.from_numpy(dense), torch.from_numpy(ids),
                    None if val is None else torch.from_numpy(val)))
    return out, nfields, k, ndense, rows


def mlp(sizes, relu_last):
    layers = []
    for i in range(len(sizes) - 1):
        lin = nn.Linear(sizes[i], sizes[i + 1])
        nn.init.xavier_uniform_(lin.weight)
        nn.init.zeros_(lin.bias)
        layers.append(lin)
        if relu_last or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class CtrModel(nn.Module):
    """DeepFM or DLRM over one sparse embedding table (row 0: padding)."""

    def __init__(self, kind, rows, nfields, k, ndense, dim, hidden, bottom):
        super().__init__()
        self.kind, self.f, self.k, self.nd, self.dim = kind, nfields, k, ndense, dim
        width = 1 + dim if kind == 'deepfm' else dim
        self.emb = nn.Embedding(rows, width, padding_idx=0, sparse=True)
        with torch.no_grad():
            a = 0.01 * math.sqrt(3.0)  # uniform on [-a, a] has std 0.01
            self.emb.weight.uniform_(-a, a)
            if kind == 'deepfm':
                self.emb.weight[:, 0] = 0.0  # linear weights w
            self.emb.weight[0] = 0.0
        self.b0 = nn.Parameter(torch.zeros(1))
        if kind == 'deepfm':
            self.register_buffer('dense_rows', torch.arange(1, 1 + ndense))
            self.mlp = mlp([nfields * dim + ndense] + hidden + [1], False)
        else:
            self.bottom = mlp([ndense] + bottom + [dim], True) if ndense else None
            nvec = nfields + (1 if ndense else 0)
            self.iu = torch.triu_indices(nvec, nvec, 1) if nvec >= 2 else None
            top_in = dim if nvec < 2 else (dim if ndense else 0) + nvec * (nvec - 1) // 2
            self.top = mlp([top_in] + hidden + [1], False)

    def fields(self, r, n):
        """Pools looked-up rows (n, F*K, w) into field embeddings (n, F, w)."""
        return r if self.k == 1 else r.view(n, self.f, self.k, -1).sum(2)

    def forward(self, ids, val, u):
        n = ids.shape[0]
        if self.kind == 'deepfm':
            if self.nd:  # the dense features are features with rows of their own
                ids = torch.cat([self.dense_rows.expand(n, -1), ids], 1)
            r = self.emb(ids)  # (n, nd + F*K, 1 + d)
            if val is not None:
                r = r * torch.cat([u, val], 1).unsqueeze(2)
            elif self.nd:  # sparse values all 1: scale the dense features' rows only
                r = torch.cat([r[:, :self.nd] * u.unsqueeze(2), r[:, self.nd:]], 1)
            v = r[:, :, 1:]
            fm = 0.5 * (v.sum(1).square() - v.square().sum(1)).sum(1)
            e = self.fields(v[:, self.nd:], n).reshape(n, -1)
            return self.b0 + r[:, :, 0].sum(1) + fm + self.mlp(torch.cat([e, u], 1)).squeeze(1)
        r = self.emb(ids)
        if val is not None:
            r = r * val.unsqueeze(2)
        e = self.fields(r, n)  # (n, F, d)
        b = self.bottom(u) if self.bottom is not None else None
        if self.iu is None:  # one field, no dense feature: the embedding itself
            top_x = e.reshape(n, -1)
        else:
            z = e if b is None else torch.cat([b.unsqueeze(1), e], 1)
            dots = torch.bmm(z, z.transpose(1, 2))[:, self.iu[0], self.iu[1]]
            top_x = dots if b is None else torch.cat([b, dots], 1)
        return self.b0 + self.top(top_x).squeeze(1)


def openblas():
    """The OpenBLAS behind torch's BLAS calls, or None. Debian's torch is built with
    BLAS_INFO=generic and calls libblas.so.3, which the alternatives system points at a BLAS
    (openblas-pthread/ when libopenblas0-pthread is installed)."""
    with open('/proc/self/maps') as f:
        blas = {line.split()[-1] for line in f if 'libblas.so' in line}
    if not any('openblas' in path for path in blas):
        log(f'torch does not call OpenBLAS: {sorted(blas)}')
        return None
    lib = ctypes.CDLL('libopenblas.so.0')
    lib.openblas_get_config.restype = ctypes.c_char_p
    return lib


def auc(scores, labels):
    """Rank-based (Mann-Whitney) AUC, tied scores sharing their average rank."""
    order = np.argsort(scores, kind='mergesort')
    _, inv, counts = np.unique(scores[order], return_inverse=True, return_counts=True)
    avg = np.cumsum(counts) - (counts - 1) / 2.0  # average 1-based rank of each tie group
    ranks = np.empty(len(scores))
    ranks[order] = avg[inv]
    pos = labels > 0.5
    npos, nneg = pos.sum(), (~pos).sum()
    if npos == 0 or nneg == 0:
        return float('nan')
    return float((ranks[pos].sum() - npos * (npos + 1) / 2.0) / (npos * nneg))


def batches(data, size):
    labels, dense, ids, val = data
    for s in range(0, len(labels), size):
        yield (labels[s:s + size], dense[s:s + size], ids[s:s + size],
               None if val is None else val[s:s + size])


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--model', choices=['deepfm', 'dlrm'], required=True)
    p.add_argument('--train', required=True)
    p.add_argument('--test', required=True)
    p.add_argument('--format', choices=['criteo', 'libffm'], default='criteo')
    p.add_argument('--dim', type=int, default=8)
    p.add_argument('--mlp', default='256,128', help="hidden layers ('none': no hidden layer)")
    p.add_argument('--bottom', default='64', help="DLRM's bottom MLP hidden layers")
    p.add_argument('--batch', type=int, default=512)
    p.add_argument('--epochs', type=int, default=1)
    p.add_argument('--threads', type=int, default=2, help="OpenBLAS's threads (matrix products)")
    p.add_argument('--omp-threads', type=int, default=1,
                   help="torch's own OpenMP threads (elementwise ops, embeddings)")
    p.add_argument('--lr', type=float, default=0.001, help='dense Adam step size')
    p.add_argument('--sparse-optimizer', choices=['adagrad', 'adam'], default='adagrad')
    p.add_argument('--sparse-lr', type=float, default=None,
                   help="default: Colony's for the optimizer (adam 0.001, adagrad 0.02)")
    p.add_argument('--seed', type=int, default=1)
    p.add_argument('--hash-buckets', type=int, default=0,
                   help='rows per field by hashing (0: a vocabulary, one row per value)')
    args = p.parse_args()
    sizes = lambda s: [] if s in ('', 'none') else [int(x) for x in s.split(',')]
    sparse_lr = args.sparse_lr or {'adam': 0.001, 'adagrad': 0.02}[args.sparse_optimizer]

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.omp_threads)
    blas = openblas()
    if blas is not None:
        blas.openblas_set_num_threads(args.threads)

    t = time.perf_counter()
    (train, test), nfields, k, ndense, rows = load(args)
    log(f'loaded {len(train[0])} train / {len(test[0])} test rows, {nfields} fields x {k} '
        f'slots, {ndense} dense, {rows} embedding rows in {time.perf_counter() - t:.1f}s')

    model = CtrModel(args.model, rows, nfields, k, ndense, args.dim, sizes(args.mlp),
                     sizes(args.bottom))
    dense_params = [q for n, q in model.named_parameters() if not n.startswith('emb.')]
    dense_opt = torch.optim.Adam(dense_params, lr=args.lr)
    if args.sparse_optimizer == 'adam':  # lazy Adam (its bias correction counts global steps)
        sparse_opt = torch.optim.SparseAdam([model.emb.weight], lr=sparse_lr)
    else:  # Colony's Adagrad starts its accumulator at 1e-6
        sparse_opt = torch.optim.Adagrad([model.emb.weight], lr=sparse_lr,
                                         initial_accumulator_value=1e-6)

    model.train()
    samples, loss_sum = 0, 0.0
    t = time.perf_counter()
    for epoch in range(args.epochs):
        for y, u, ids, val in batches(train, args.batch):
            loss = F.binary_cross_entropy_with_logits(model(ids, val, u), y)
            dense_opt.zero_grad(set_to_none=True)
            sparse_opt.zero_grad(set_to_none=True)
            loss.backward()
            model.emb.weight.grad.mul_(len(y))  # summed over the batch, as Colony's rows
            dense_opt.step()
            sparse_opt.step()
            samples += len(y)
            loss_sum += loss.item() * len(y)
        log(f'epoch {epoch + 1}: train logloss {loss_sum / samples:.5f}, '
            f'{samples / (time.perf_counter() - t):.0f} samples/s')
    train_seconds = time.perf_counter() - t

    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(ids, val, u) for _, u, ids, val in batches(test, 8192)])
    labels = test[0].double()
    test_logloss = F.binary_cross_entropy_with_logits(logits.double(), labels).item()
    result = {
        'model': args.model, 'samples': samples, 'train_seconds': round(train_seconds, 4),
        'samples_per_sec': round(samples / train_seconds, 1),
        'test_logloss': round(test_logloss, 6),
        'test_auc': round(auc(logits.double().numpy(), labels.numpy()), 6),
        'train_logloss': round(loss_sum / max(samples, 1), 6),
        'torch': torch.__version__,
        'blas': 'openblas' if blas is not None else 'other',
        'blas_config': blas.openblas_get_config().decode() if blas is not None else '',
        'threads': args.threads, 'omp_threads': args.omp_threads, 'batch': args.batch, 'epochs': args.epochs, 'dim': args.dim,
        'embedding_rows': rows, 'sparse_optimizer': args.sparse_optimizer,
        'sparse_lr': sparse_lr, 'dense_lr': args.lr,
    }
    print(json.dumps(result), flush=True)


if __name__ == '__main__':
    main()
