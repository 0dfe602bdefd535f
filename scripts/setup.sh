#!/usr/bin/env bash
# setup.sh: installs the Debian packages cohort needs to build and test, only those missing.
set -euo pipefail

# Build: compiler, CMake, clang (libFuzzer and sanitizers); runtime: OpenBLAS, Open MPI;
# test-only oracles: PyTorch and NumPy from Debian.
packages=(build-essential cmake clang libclang-rt-dev libopenblas-dev libopenmpi-dev openmpi-bin
          python3-torch python3-numpy)
# ---- training engine: the main job's corpus (plain-text fortunes, /usr/share/games/fortunes) --
packages+=(fortunes)
# ---- end training engine -------------------------------------------------------------------------
# --- cluster: a one-node Slurm cluster started by tests/launch/test_launch_slurm.sh (slurmctld,
# slurmd, srun, munge) and MPICH (mpiexec.hydra, and libcohort_mpich.so for Hydra and srun
# --mpi=pmi2 jobs; Open MPI stays the default mpirun and mpicc)
packages+=(slurmctld slurmd slurm-client munge mpich libmpich-dev pkg-config)
# --- end cluster
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
