#!/usr/bin/env bash
# The check to run on a machine with a GPU (issue 13): configures with the CUDA backend on,
# builds the device tests, runs them (they must run, not skip: a skipped case fails this
# script), and prints one table. Run from anywhere; builds in build-gpu/. Exit 0 only when every
# check passed.
#
# What it checks: the device code on the GPU against its host build (tests/cuda_test.cpp: the
# Thrust sums of gpu/thrust_sum.h bit for bit, the LR and FM pass of gpu/fm_pass.h within fp32
# bounds, the deep models' pass of gpu/deep_pass.h within fp32 and bf16 bounds), the host
# builds against the CPU backend (reduce_test, model_test), DeepFM, DLRM and DCN-v2 trained end
# to end on the GPU (bf16 products) against the CPU backend on the same data (test logloss within
# 1%), and then times the LR and FM pass (gather, per-key gradient reduction) against the CPU
# backend and the host-to-device copy bandwidth, and a step of each deep model against the CPU
# backend with its dense layers' FLOP/s against cuBLAS's peak, all measured in the same run
# (`colony bench device`).
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
scripts/install-deps.sh || exit 1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version \
  --format=csv,noheader
mkdir -p build-gpu
log=build-gpu/gpu-check-build.log
if ! cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCOLONY_CUDA=ON >"$log" 2>&1 ||
   ! cmake --build build-gpu -j"$(nproc)" --target cuda_test reduce_test model_test colony \
     >>"$log" 2>&1; then
  tail -30 "$log"
  echo "gpu-check: the CUDA build failed ($log)"
  exit 1
fi
fail=0
row() { printf '| %-58s | %-7s | %s |\n' "$1" "$2" "$3"; }
echo
row "check" "result" "detail"
row "---" "---" "---"
for t in cuda_test reduce_test model_test; do
  out=$(build-gpu/tests/$t --color_output=no --log_level=test_suite --report_level=short 2>&1)
  rc=$?
  skipped=$(grep -c "is skipped" <<<"$out")
  if [ $rc -ne 0 ] || [ "$skipped" -ne 0 ]; then
    fail=1
    row "$t" "FAIL" "exit $rc, $skipped skipped: $(grep -m1 -E 'error|skipped' <<<"$out")"
  else
    row "$t" "ok" "$(grep -m1 -E 'No errors|passed' <<<"$out")"
  fi
done
# The deep models end to end: the same generated data and seed on the CPU and on the GPU.
for model in deepfm dlrm dcn; do
  declare -A loss=()
  for dev in cpu cuda; do
    build-gpu/colony train --model $model --device $dev --rows 200000 --test-rows 20000 \
      >build-gpu/$model-$dev.log 2>&1
    loss[$dev]=$(grep -oE 'test_logloss [0-9.]+' build-gpu/$model-$dev.log | tail -1 | cut -d' ' -f2)
  done
  if [ -n "${loss[cpu]}" ] && [ -n "${loss[cuda]}" ] &&
     awk -v c="${loss[cpu]}" -v g="${loss[cuda]}" 'BEGIN { d = (g - c) / c; exit !(d < 0.01 && d > -0.01) }'; then
    row "colony train --model $model, cuda against cpu" "ok" "test logloss ${loss[cuda]} / ${loss[cpu]}"
  else
    fail=1
    row "colony train --model $model, cuda against cpu" "FAIL" \
      "test logloss '${loss[cuda]}' / '${loss[cpu]}' (build-gpu/$model-*.log)"
  fi
done
row "wall seconds, build and tests" "" "$((SECONDS - start))"
echo
if ! build-gpu/colony bench device --rows 200000 --repeats 3; then
  fail=1
  echo "gpu-check: colony bench device failed"
fi
exit $fail
