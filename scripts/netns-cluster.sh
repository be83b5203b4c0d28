#!/usr/bin/env bash
# Runs a cluster on two "hosts" made of network namespaces joined by a veth pair: the
# coordinator, a ps and a worker on host A (10.231.9.1), a ps and a worker on host B
# (10.231.9.2), with CURVE keys. Needs root (ip netns). Cleans up after itself.
# Usage: scripts/netns-cluster.sh DATA_DIR [OUT_DIR]   (DATA_DIR from `colony gen`)
set -euo pipefail
data=${1:?usage: $0 DATA_DIR [OUT_DIR]}
out=${2:-netns-cluster-out}
bin=$(cd "$(dirname "$0")/.." && pwd)/build/colony
[ -x "$bin" ] || { echo "build first: $bin not found" >&2; exit 1; }
a=colony-host-a-$$ b=colony-host-b-$$ va=cha$$ vb=chb$$
rm -rf "$out"; mkdir -p "$out"
"$bin" keygen --out "$out/keys" --nodes 4 >/dev/null
ip netns add "$a"; ip netns add "$b"
trap 'ip netns del "$a"; ip netns del "$b"' EXIT
ip link add "$va" type veth peer name "$vb"
ip link set "$va" netns "$a"; ip link set "$vb" netns "$b"
ip -n "$a" addr add 10.231.9.1/24 dev "$va"; ip -n "$b" addr add 10.231.9.2/24 dev "$vb"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "$va" up; ip -n "$b" link set "$vb" up
coord=tcp://10.231.9.1:7100 keys=(--keys "$out/keys")
ip netns exec "$a" "$bin" coordinator --listen "$coord" "${keys[@]}" --shards 2 --workers 2 \
  --test "$data/test.libsvm" --report "$out/report.json" >"$out/coordinator.log" 2>&1 &
pid=$!
ip netns exec "$a" "$bin" ps --coordinator "$coord" --listen tcp://10.231.9.1:7101 "${keys[@]}" --key node-0 >"$out/ps-a.log" 2>&1 &
ip netns exec "$a" "$bin" worker --coordinator "$coord" --listen tcp://10.231.9.1:7102 "${keys[@]}" --key node-1 \
  --data "$data/train.libsvm" >"$out/worker-a.log" 2>&1 &
ip netns exec "$b" "$bin" ps --coordinator "$coord" --listen tcp://10.231.9.2:7101 "${keys[@]}" --key node-2 >"$out/ps-b.log" 2>&1 &
ip netns exec "$b" "$bin" worker --coordinator "$coord" --listen tcp://10.231.9.2:7102 "${keys[@]}" --key node-3 \
  --data "$data/train.libsvm" >"$out/worker-b.log" 2>&1 &
rc=0
wait "$pid" || rc=$?
wait || true
tail -n 4 "$out/coordinator.log"
echo "coordinator exited $rc; report: $out/report.json"
exit "$rc"
