#!/usr/bin/env python3
"""A real sparse CTR-like data set from Debian's package index (see make-debian-data.sh).

Task: "does this debtag belong to this package?" Each row is (package, candidate tag); label 1
when the package's Tag: field has the tag, 0 for negative candidates drawn by tag popularity.
Only packages with at least one kept tag give rows. Features describe the package (name,
description, section, dependencies, ...) and the candidate tag; none is derived from the
package's own tags, so the label does not leak.

Usage: debian_data.py OUT_DIR PACKAGES_FILE [PACKAGES_FILE_TEXT]
  PACKAGES_FILE_TEXT: the decompressed text of PACKAGES_FILE (default: read it with
  `apt-helper cat-file PACKAGES_FILE`). Output: OUT_DIR/{train,valid,test}.libffm and
  OUT_DIR/README-data.txt. Same input, same bytes.
"""

import bisect
import hashlib
import math
import os
import random
import re
import subprocess
import sys
import time

SEED = 20240601
NEGATIVES_PER_POSITIVE = 4
MIN_TAG_PACKAGES = 20  # a tag is a candidate when at least this many train packages have it
MAX_NAME_TOKENS = 8
MAX_DESC_WORDS = 12
MAX_DEPENDS = 12
MAX_RELATED = 8
SPLITS = ("train", "valid", "test")

# (field id, name, description); the field id is the libffm field.
FIELDS = [
    (0, "tag", "candidate tag, facet::value (e.g. implemented-in::c)"),
    (1, "facet", "the candidate tag's facet (e.g. implemented-in)"),
    (2, "name", "package name tokens split on - . + _ (up to %d), plus 'lib*' / 'ends-in-digit'"
     " / '-dev' style markers" % MAX_NAME_TOKENS),
    (3, "desc", "short Description words: lowercased, stopwords and 1-letter words out, first"
     " %d distinct" % MAX_DESC_WORDS),
    (4, "section", "Section (e.g. libs, perl, utils)"),
    (5, "priority", "Priority (optional, required, ...)"),
    (6, "maintainer", "Maintainer e-mail address (lowercased; a team address for team-maintained"
     " packages)"),
    (7, "maint_domain", "domain of the Maintainer e-mail address"),
    (8, "depends", "names in Depends and Pre-Depends, alternatives included, versions and"
     " architecture qualifiers dropped, first %d distinct" % MAX_DEPENDS),
    (9, "related", "names in Recommends and Suggests, as r:NAME and s:NAME, first %d"
     % MAX_RELATED),
    (10, "source", "Source package name (the package's own name when it has no Source field)"),
    (11, "size", "floor(log2(Installed-Size in KiB)), or 'none'"),
    (12, "homepage", "Homepage host name without 'www.', or 'none'"),
    (13, "misc", "arch=all|amd64|..., ma=<Multi-Arch or none>, essential=yes when Essential"),
]

STOPWORDS = set("""
a an and are as at be by for from in into is it its of on or that the this to with without
via using use used your you can which based other some more all also any not no only its
""".split())


def log(msg):
    print(msg, flush=True)


def stable_hash(text):
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def feature_index(field_name, token):
    return stable_hash(field_name + "=" + token) % (1 << 31)


def split_of(package):
    h = stable_hash("split:" + package) % 10
    return "train" if h < 8 else ("valid" if h == 8 else "test")


def parse_stanzas(text):
    """Yields dicts field -> value (continuation lines joined with '\n')."""
    for block in text.split("\n\n"):
        fields = {}
        key = None
        for line in block.split("\n"):
            if not line:
                continue
            if line[0] in " \t":
                if key is not None:
                    fields[key] += "\n" + line.strip()
                continue
            k, sep, v = line.partition(":")
            if not sep:
                continue
            key = k.strip()
            fields[key] = v.strip()
        if "Package" in fields:
            yield fields


def parse_tags(value):
    tags = []
    for t in value.replace("\n", " ").split(","):
        t = t.strip()
        if t and "::" in t and not t.endswith("::TODO"):
            tags.append(t)
    return tags


def dep_names(value):
    names = []
    for clause in value.split(","):
        for alt in clause.split("|"):
            alt = re.sub(r"\(.*?\)|\[.*?\]|<.*?>", " ", alt).strip()
            if not alt:
                continue
            name = alt.split()[0].split(":")[0].lower()
            if name:
                names.append(name)
    return names


def distinct(items, limit):
    out = []
    seen = set()
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
            if len(out) == limit:
                break
    return out


def package_features(p):
    """field name -> list of tokens describing the package (never its tags)."""
    name = p["Package"]
    name_tokens = [t for t in re.split(r"[-.+_]", name.lower()) if t]
    markers = []
    if name.startswith("lib"):
        markers.append("^lib")
    if name[-1].isdigit():
        markers.append("digit$")
    if "-" in name:
        markers.append("-" + name.rsplit("-", 1)[1] + "$")
    name_f = distinct(markers + name_tokens, MAX_NAME_TOKENS + len(markers))

    desc = p.get("Description", "").split("\n")[0].lower()
    words = [w for w in re.findall(r"[a-z0-9][a-z0-9+#]*", desc)
             if len(w) > 1 and w not in STOPWORDS]
    desc_f = distinct(words, MAX_DESC_WORDS) or ["none"]

    maint = p.get("Maintainer", "").strip()
    m = re.search(r"<([^>]+)>", maint)
    email = (m.group(1) if m else maint).strip().lower() or "none"
    domain = email.rsplit("@", 1)[1] if "@" in email else "none"

    deps = dep_names(p.get("Pre-Depends", "")) + dep_names(p.get("Depends", ""))
    deps_f = distinct(deps, MAX_DEPENDS) or ["none"]
    related = (["r:" + n for n in dep_names(p.get("Recommends", ""))] +
               ["s:" + n for n in dep_names(p.get("Suggests", ""))])
    related_f = distinct(related, MAX_RELATED) or ["none"]

    source = p.get("Source", "").split()[0] if p.get("Source", "").strip() else name

    size = p.get("Installed-Size", "").strip()
    if size.isdigit() and int(size) > 0:
        size_f = str(int(math.log2(int(size))))
    else:
        size_f = "none"

    home = p.get("Homepage", "").strip().lower()
    m = re.match(r"^[a-z][a-z0-9+.-]*://([^/:?#]+)", home)
    host = m.group(1) if m else "none"
    if host.startswith("www."):
        host = host[4:]

    misc = ["arch=" + p.get("Architecture", "none").strip(),
            "ma=" + (p.get("Multi-Arch", "").strip() or "none")]
    if p.get("Essential", "").strip().lower() == "yes":
        misc.append("essential=yes")

    return {
        "name": name_f,
        "desc": desc_f,
        "section": [p.get("Section", "").strip() or "none"],
        "priority": [p.get("Priority", "").strip() or "none"],
        "maintainer": [email],
        "maint_domain": [domain],
        "depends": deps_f,
        "related": related_f,
        "source": [source.lower()],
        "size": [size_f],
        "homepage": [host],
        "misc": misc,
    }


def shuffle(items, rng):
    # Fisher-Yates on rng.random() (MT19937 doubles, stable across Python 3 versions).
    for i in range(len(items) - 1, 0, -1):
        j = int(rng.random() * (i + 1))
        items[i], items[j] = items[j], items[i]


def release_date(packages_file):
    base = os.path.basename(packages_file)
    m = re.match(r"^(.*_dists_[^_]+)_", base)
    if not m:
        return "unknown", "none"
    for suffix in ("_InRelease", "_Release"):
        path = os.path.join(os.path.dirname(packages_file), m.group(1) + suffix)
        if os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("Date:"):
                        return line.split(":", 1)[1].strip(), os.path.basename(path)
            return "unknown", os.path.basename(path)
    return "unknown", "none"


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    out_dir, packages_file = sys.argv[1], sys.argv[2]
    t0 = time.time()
    if len(sys.argv) == 4:
        with open(sys.argv[3], "rb") as f:
            raw = f.read()
    else:
        raw = subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", packages_file],
                             check=True, stdout=subprocess.PIPE).stdout
    text = raw.decode("utf-8", errors="replace")
    text_sha = hashlib.sha256(raw).hexdigest()
    log("read %s: %d bytes decompressed (sha256 %s)" % (packages_file, len(raw), text_sha))

    packages = {}
    n_stanzas = 0
    dup = 0
    for st in parse_stanzas(text):
        n_stanzas += 1
        name = st["Package"].strip()
        if name in packages:
            dup += 1  # the first stanza of a name wins (same file -> same choice)
            continue
        packages[name] = st
    tagged = {n: p for n, p in packages.items() if parse_tags(p.get("Tag", ""))}
    log("%d stanzas, %d packages (%d repeated names skipped), %d with non-TODO tags"
        % (n_stanzas, len(packages), dup, len(tagged)))
    if not tagged:
        sys.exit("error: no package in %s has a Tag: field (debtags); use a Debian main list"
                 % packages_file)

    # Candidate tags: popular enough among TRAIN packages (valid/test labels never choose them).
    train_counts = {}
    for n, p in tagged.items():
        if split_of(n) == "train":
            for t in set(parse_tags(p["Tag"])):
                train_counts[t] = train_counts.get(t, 0) + 1
    vocab = sorted(t for t, c in train_counts.items() if c >= MIN_TAG_PACKAGES)
    weights = [train_counts[t] for t in vocab]
    cum = []
    acc = 0
    for w in weights:
        acc += w
        cum.append(acc)
    total_w = acc
    log("%d distinct tags in train packages, %d kept as candidates (>= %d train packages)"
        % (len(train_counts), len(vocab), MIN_TAG_PACKAGES))
    vocab_set = set(vocab)

    field_names = [f[1] for f in FIELDS]
    field_id = {f[1]: f[0] for f in FIELDS}
    lines = {s: [] for s in SPLITS}
    pos = {s: 0 for s in SPLITS}
    pkgs = {s: 0 for s in SPLITS}
    distinct_features = {f: set() for f in field_names}
    feature_count = 0

    def encode(fname, tokens):
        fid = field_id[fname]
        parts = []
        for tok in tokens:
            distinct_features[fname].add(tok)
            parts.append("%d:%d:1" % (fid, feature_index(fname, tok)))
        return parts

    for n in sorted(tagged):
        p = tagged[n]
        own = set(parse_tags(p["Tag"]))
        positives = sorted(own & vocab_set)
        if not positives:
            continue
        split = split_of(n)
        pkgs[split] += 1
        rng = random.Random(stable_hash("negatives:%d:%s" % (SEED, n)))
        want = min(NEGATIVES_PER_POSITIVE * len(positives), len(vocab_set - own))
        negatives = []
        chosen = set()
        while len(negatives) < want:
            i = bisect.bisect_right(cum, rng.random() * total_w)
            t = vocab[min(i, len(vocab) - 1)]
            if t in own or t in chosen:
                continue
            chosen.add(t)
            negatives.append(t)
        feats = package_features(p)
        pkg_parts = []
        for fname in field_names[2:]:
            pkg_parts += encode(fname, feats[fname])
        pkg_str = " ".join(pkg_parts)
        for label, tags in ((1, positives), (0, negatives)):
            for t in tags:
                parts = encode("tag", [t]) + encode("facet", [t.split("::", 1)[0]])
                lines[split].append("%d %s %s\n" % (label, " ".join(parts), pkg_str))
                feature_count += 2 + len(pkg_parts)
                pos[split] += label

    os.makedirs(out_dir, exist_ok=True)
    sha = {}
    for s in SPLITS:
        rng = random.Random(stable_hash("shuffle:%d:%s" % (SEED, s)))
        shuffle(lines[s], rng)
        data = "".join(lines[s]).encode("ascii")
        path = os.path.join(out_dir, s + ".libffm")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        sha[s] = hashlib.sha256(data).hexdigest()
        log("wrote %s: %d rows, %d positives (%.2f%%), %d packages, %d bytes"
            % (path, len(lines[s]), pos[s], 100.0 * pos[s] / max(1, len(lines[s])), pkgs[s],
               len(data)))

    rows = sum(len(lines[s]) for s in SPLITS)
    positives_all = sum(pos.values())
    date, release_file = release_date(packages_file)
    n_distinct = sum(len(v) for v in distinct_features.values())

    def base_rate_logloss(s):
        r = pos[s] / len(lines[s])
        return -(r * math.log(r) + (1 - r) * math.log(1 - r))

    readme = []
    w = readme.append
    w("Debian debtags data set: does this tag belong to this package?")
    w("")
    w("Built by scripts/make-debian-data.sh (scripts/debian_data.py) from Debian's package index.")
    w("Source list:     %s" % os.path.basename(packages_file))
    w("Release file:    %s, Date: %s" % (release_file, date))
    w("Source sha256:   %s (decompressed text)" % text_sha)
    w("Packages:        %d (%d with non-TODO tags; %d gave rows)"
      % (len(packages), len(tagged), sum(pkgs.values())))
    w("")
    w("Task. One row per (package, candidate tag). Label 1: the package's Tag: field lists the")
    w("tag. Label 0: a negative candidate, %d per positive, drawn without replacement from the"
      % NEGATIVES_PER_POSITIVE)
    w("candidate tags the package does not have, with probability proportional to the number")
    w("of train packages having the tag (so the tag alone says little; its interactions with")
    w("the package's fields carry the signal). Seeded per package (seed %d): deterministic." % SEED)
    w("Candidate tags: the %d tags (of %d in train packages) that at least %d train packages"
      % (len(vocab), len(train_counts), MIN_TAG_PACKAGES))
    w("have; '*::TODO' tags are ignored. A package's tags outside this set are neither positives")
    w("nor negatives. No feature is derived from the package's own tags.")
    w("")
    w("Split by package: blake2b-64('split:' + name) mod 10: 0-7 train, 8 valid, 9 test; all")
    w("rows of a package are in one file. Rows are shuffled within each file (fixed seed).")
    w("Note: packages of one source (libfoo1, libfoo-dev) may land in different splits and share")
    w("description words, source and maintainer, so scores are somewhat optimistic compared with")
    w("a split by source package.")
    w("")
    w("Format: libffm, '<label> <field>:<index>:1 ...'. index = blake2b-64(name + '=' + token)")
    w("mod 2^31 where name is the field's name below (collisions are possible, and rare).")
    w("Every row has features in all %d fields (0..%d); multi-valued fields have several."
      % (len(FIELDS), len(FIELDS) - 1))
    w("")
    w("Fields (id, name, distinct tokens over all files, what):")
    for fid, fname, desc in FIELDS:
        w("  %2d %-13s %7d  %s" % (fid, fname, len(distinct_features[fname]), desc))
    w("  distinct features in all: %d; features per row: %.1f on average"
      % (n_distinct, feature_count / rows))
    w("")
    w("Files:")
    for s in SPLITS:
        w("  %-14s %7d rows  %6d positives (%.2f%%)  %5d packages  base-rate logloss %.4f"
          % (s + ".libffm", len(lines[s]), pos[s], 100.0 * pos[s] / len(lines[s]), pkgs[s],
             base_rate_logloss(s)))
    w("  %-14s %7d rows  %6d positives (%.2f%%)"
      % ("all", rows, positives_all, 100.0 * positives_all / rows))
    w("")
    w("Use valid.libffm to choose settings; keep test.libffm for the final number.")
    w("")
    w("sha256:")
    for s in SPLITS:
        w("  %s  %s.libffm" % (sha[s], s))
    readme_path = os.path.join(out_dir, "README-data.txt")
    with open(readme_path, "w", encoding="utf-8") as f:
        f.write("\n".join(readme) + "\n")

    log("")
    log("summary: %d rows (train %d, valid %d, test %d), %d positives (%.2f%%), %d fields,"
        " %d distinct features, %.1f features/row, %d candidate tags, %.1f s"
        % (rows, len(lines["train"]), len(lines["valid"]), len(lines["test"]), positives_all,
           100.0 * positives_all / rows, len(FIELDS), n_distinct, feature_count / rows,
           len(vocab), time.time() - t0))


if __name__ == "__main__":
    main()
