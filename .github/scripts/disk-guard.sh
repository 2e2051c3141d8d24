#!/usr/bin/env bash
# Disk guard of a CI job: print the free space and fail loudly (a GitHub error
# annotation) when it is below what the job needs. Sizes in GiB (2^30 bytes), as df -h
# and docs/test-footprint.md give them.
#
# Usage: disk-guard.sh NEEDED_GIB [PATH]   (PATH default: the working directory)
#
# What a release build job needs (measured on Linux x86_64, Python 3.11, in decimal GB;
# the test jobs' needs come from their records, .ci/matrix): each cell's torch goes
# into its own `--no-deps` folder, 1.6-1.7 GB for a CUDA torch (2.6.0, 2.8.0)
# plus the CUDA header wheels; the linux_x86_64-cuda job has 7 such folders
# (~12 GB; uv hard-links them from its cache). The test step installs an importable
# CUDA torch with its nvidia wheels (5.2 GB for 2.8.0). With the manylinux image
# and the build's scratch space, a CUDA job needs ~20 GB; CPU-only jobs ~8 GB.
set -euo pipefail
needed="${1:?usage: disk-guard.sh NEEDED_GIB [PATH]}"
where="${2:-.}"
free_kb="$(df -Pk "$where" | awk 'NR == 2 { print $4 }')"
free_gib=$((free_kb / 1024 / 1024))
df -h "$where"
if [ "$free_gib" -lt "$needed" ]; then
  echo "::error title=runner disk::${free_gib} GiB free at $where, this job needs ${needed} GiB"
  exit 1
fi
echo "disk ok: ${free_gib} GiB free at $where (needs ${needed} GiB)"
