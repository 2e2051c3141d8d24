#!/usr/bin/env bash
# Pre-flight check of a cibuildwheel builder image, run INSIDE the image by the
# release workflow before cibuildwheel starts (ROCm jobs: their images are not
# pypa's manylinux ones). It reports every problem at once, as GitHub error
# annotations, and exits 1 if there is any, so a wrong image fails its own job
# loudly in seconds instead of deep inside cibuildwheel.
#
# Usage: preflight-image.sh PYTHON_TAG [ROCM_VERSION]
#   PYTHON_TAG    cp312 (the job's Python: /opt/python/cp312-cp312 must exist)
#   ROCM_VERSION  6.2.4 (the ROCm the job's flavour declares; /opt/rocm/.info/version
#                 must start with it, and the HIP headers must be there)
# PREFLIGHT_ROOT (default empty) prefixes every path, so the checks can be tested
# against a directory tree.
set -uo pipefail

python_tag="${1:?usage: preflight-image.sh PYTHON_TAG [ROCM_VERSION]}"
rocm_version="${2:-}"
root="${PREFLIGHT_ROOT:-}"
problems=0

fail() {
  echo "::error title=builder image::$1"
  problems=$((problems + 1))
}

interpreter="$root/opt/python/${python_tag}-${python_tag}/bin/python"
if [ -x "$interpreter" ]; then
  echo "ok: $interpreter"
else
  found=""
  for candidate in "$root"/opt/python/cp3*; do
    [ -e "$candidate" ] && found="$found ${candidate##*/}"
  done
  fail "no $interpreter (cibuildwheel needs /opt/python/<tag>-<tag>); image has: ${found:-none}"
fi

if PATH="$root/usr/local/bin:$root/usr/bin:$PATH" command -v auditwheel >/dev/null 2>&1; then
  echo "ok: auditwheel on PATH"
else
  fail "auditwheel is not on PATH (the repair step runs it)"
fi

if [ -n "${AUDITWHEEL_PLAT:-}" ]; then
  echo "ok: AUDITWHEEL_PLAT=$AUDITWHEEL_PLAT"
else
  fail "AUDITWHEEL_PLAT is not set (the repair step passes --plat \"\$AUDITWHEEL_PLAT\" --only-plat)"
fi

if [ -n "$rocm_version" ]; then
  version_file="$root/opt/rocm/.info/version"
  if [ -r "$version_file" ]; then
    have="$(head -n 1 "$version_file")"
    case "$have" in
      "$rocm_version" | "$rocm_version".* | "$rocm_version"-*) echo "ok: ROCm $have" ;;
      *) fail "image has ROCm $have, the flavour declares $rocm_version (matrix.toml)" ;;
    esac
  else
    fail "no $version_file: no ROCm installation in the image"
  fi
  if [ ! -d "$root/opt/rocm/include/hip" ]; then
    fail "no $root/opt/rocm/include/hip: the HIP headers are missing"
  fi
fi

if [ "$problems" -gt 0 ]; then
  echo "::error title=builder image::$problems problem(s); fix the image in matrix.toml"
  exit 1
fi
echo "builder image ok"
