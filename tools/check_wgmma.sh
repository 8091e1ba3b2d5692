#!/usr/bin/env bash
# Fails when ptxas serializes a kernel's warpgroup products (its note C7520, "wgmma.mma_async
# instructions are serialized due to ..."). The kernel then still computes the right answers, only
# at a fraction of its speed, so no functional test would notice. Compiles every CUDA file that
# includes warpgroup_mma.cuh as a Release build does, with ptxas's report on; FLAGS are the build's
# machine-code flags (cmake/cuda.cmake: QWICK_CUDA_CODE_FLAGS, which the ctest passes).
#   tools/check_wgmma.sh NVCC SOURCE_DIR FLAGS...
set -uo pipefail
nvcc=$1 root=$2
shift 2
if (($# == 0)); then
  echo "usage: tools/check_wgmma.sh NVCC SOURCE_DIR FLAGS..."
  exit 2
fi
files=$(cd "$root" && grep -rl --include='*.cu' 'warpgroup_mma.cuh' src | sort)
if [[ -z "$files" ]]; then
  echo "no CUDA file includes warpgroup_mma.cuh"
  exit 1
fi
status=0
for f in $files; do
  if ! log=$("$nvcc" -O3 -DNDEBUG -std=c++20 "$@" -DFMT_SHARED -I"$root/src" -Xptxas -v -c "$root/$f" \
    -o /dev/null 2>&1); then
    echo "$log"
    echo "$f: did not compile"
    status=1
  elif grep -q C7520 <<<"$log"; then
    grep C7520 <<<"$log"
    echo "$f: ptxas serialized its warpgroup products (docs/cuda.md)"
    status=1
  else
    echo "$f: no serialized warpgroup products"
  fi
done
exit $status
