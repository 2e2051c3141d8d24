#!/usr/bin/env bash
# Disk guard of a release build job: print the free space and fail loudly
# (a GitHub error annotation) when it is below what the job needs.
#
# Usage: disk-guard.sh NEEDED_GB [PATH]   (PATH default: the working directory)
#
# What a job needs (measured on Linux x86_64, Python 3.11): each cell's torch goes
# into its own `--no-deps` folder, 1.6-1.7 GB for a CUDA torch (2.6.0, 2.8.0)
# plus the CUDA header wheels; the linux_x86_64-cuda job has 7 such folders
# (~12 GB; uv hard-links them from its cache). The test step installs an importable
# CUDA torch with its nvidia wheels (5.2 GB for 2.8.0). With the manylinux image
# and the build's scratch space, a CUDA job needs ~20 GB; CPU-only jobs ~8 GB.
set -euo pipefail
needed="${1:?usage: disk-guard.sh NEEDED_GB [PATH]}"
where="${2:-.}"
free_kb="$(df -Pk "$where" | awk 'NR == 2 { print $4 }')"
free_gb=$((free_kb / 1024 / 1024))
df -h "$where"
if [ "$free_gb" -lt "$needed" ]; then
  echo "::error title=runner disk::${free_gb} GB free at $where, this job needs ${needed} GB"
  exit 1
fi
echo "disk ok: ${free_gb} GB free at $where (needs ${needed} GB)"
