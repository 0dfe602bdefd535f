#!/usr/bin/env bash
# setup.sh: installs the Debian packages cohort needs to build and test, only those missing.
set -euo pipefail

# Build: compiler, CMake, clang (libFuzzer and sanitizers); runtime: OpenBLAS, Open MPI;
# test-only oracles: PyTorch and NumPy from Debian.
packages=(build-essential cmake clang libclang-rt-dev libopenblas-dev libopenmpi-dev openmpi-bin
          python3-torch python3-numpy)
# ---- training engine: the main job's corpus (plain-text fortunes, /usr/share/games/fortunes) --
packages+=(fortunes)
# bf16-mixed precision: oneDNN's bf16 matmul (Debian's OpenBLAS has no bf16 GEMM)
packages+=(libdnnl-dev)
# ---- end training engine -------------------------------------------------------------------------
# --- data: the Unicode Character Database, source of the GPT-2 pre-split's letter/number tables
packages+=(unicode-data)
# --- end data

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all ${#packages[@]} packages present"
    exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
