#!/usr/bin/env bash
# Proves that scripts/gpu-check.sh builds with no network from what `--prepare` downloaded: a clean Debian 12
# chroot (debootstrap --variant=minbase) holding only CMake, ninja and g++, the tree (git ls-files) and
# gpu-deps/ copied in, the check run there with the network cut (unshare -n). There is no GPU in the chroot,
# so the steps after the build fail or skip; the proof is that summary.txt says the offline-deps, configure
# and build steps passed. Root only (debootstrap, chroot, unshare); slow (the test binary on this machine's
# cores, no ccache): not run in CI.
#
#   sudo scripts/gpu-check-offline-proof.sh      (outputs in build-chroot/out, exit status 0 when proven)
#
# PROOF_MIRROR: the Debian mirror for debootstrap (default: the first URI of this machine's apt sources).
# PROOF_JOBS: build parallelism in the chroot (default 2). The chroot (build-chroot/root) is kept and reused.
set -euo pipefail

cd "$(dirname "$0")/.."
((EUID == 0)) || { echo "gpu-check-offline-proof: needs root (debootstrap, chroot, unshare)" >&2; exit 1; }
WORK="$PWD/build-chroot"
ROOT="$WORK/root"
JOBS="${PROOF_JOBS:-2}"
mkdir -p "$WORK"
say() { echo "[offline-proof $(date +%T)] $*"; }

# 1. The packages, downloaded here where the registry is.
say "scripts/gpu-check.sh --prepare"
bash scripts/gpu-check.sh --prepare

# 2. The chroot: Debian 12 minbase with CMake, ninja and g++ and nothing else of the build's.
if [[ ! -x $ROOT/usr/bin/cmake || ! -x $ROOT/usr/bin/g++ || ! -x $ROOT/usr/bin/ninja ]]; then
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap
  mirror="${PROOF_MIRROR:-$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)}"
  mirror="${mirror:-http://deb.debian.org/debian}"
  say "debootstrap --variant=minbase bookworm from $mirror"
  rm -rf "$ROOT"
  debootstrap --variant=minbase --include=cmake,ninja-build,g++ bookworm "$ROOT" "$mirror"
fi
for header in gtest/gtest.h fmt/format.h CLI/CLI.hpp nlohmann/json.hpp boost/intrusive/set.hpp zlib.h; do
  if [[ -e $ROOT/usr/include/$header ]]; then
    echo "gpu-check-offline-proof: the chroot has /usr/include/$header: not a clean one (rm -rf $ROOT)" >&2
    exit 1
  fi
done

# 3. The tree as committed files plus the prepared folder, nothing of this machine's builds.
rm -rf "$ROOT/src/tessera" "$ROOT/src/out"
mkdir -p "$ROOT/src/tessera"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$ROOT/src/tessera"
cp -r gpu-deps "$ROOT/src/tessera/"
say "tree copied: $(du -sh "$ROOT/src/tessera" | cut -f1) ($(du -sh gpu-deps | cut -f1) of it gpu-deps/)"

# 4. The check, with no network: a connection to the mirror's address must fail first.
address=$(getent ahostsv4 deb.debian.org | awk 'NR == 1 {print $1}')
address="${address:-151.101.2.132}"
if timeout 5 bash -c "exec 3<>/dev/tcp/$address/80" 2>/dev/null; then
  say "this machine reaches the mirror's address $address:80 (the chroot must not)"
else
  say "this machine does not reach $address:80 either: the check below proves less"
fi
say "unshare -n chroot: scripts/gpu-check.sh (build parallelism $JOBS)"
started=$SECONDS
rc=0
# shellcheck disable=SC2016  # the script's $1..$3 are expanded by the bash inside unshare
unshare --net --mount --fork bash -c '
  set -e
  mount -t proc proc "$1/proc"
  if chroot "$1" /usr/bin/timeout 5 /bin/bash -c "exec 3<>/dev/tcp/$2/80" 2>/dev/null; then
    echo "gpu-check-offline-proof: the chroot reaches $2:80: the network is not cut" >&2
    exit 3
  fi
  echo "network cut: no connection to $2:80"
  chroot "$1" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 OUT=/src/out \
    GPU_CHECK_BUDGET=10800 GPU_CHECK_BUILD_LIMIT=9000 GPU_CHECK_JOBS="$3" \
    /bin/bash -c "cd /src/tessera && bash scripts/gpu-check.sh"
' proof "$ROOT" "$address" "$JOBS" >"$WORK/gpu-check.log" 2>&1 || rc=$?
say "gpu-check.sh in the chroot: exit $rc after $((SECONDS - started))s (expected non-zero: no GPU)"
((rc == 3)) && { cat "$WORK/gpu-check.log"; exit 1; }
rm -rf "$WORK/out"
cp -r "$ROOT/src/out" "$WORK/out"

# 5. The verdict: the steps that need no GPU passed.
summary="$WORK/out/summary.txt"
cat "$summary"
verdict=0
for step in offline-deps configure build capi-build; do
  if grep -qE "^$step passed" "$summary"; then
    say "$step: passed"
  else
    say "$step: NOT passed"
    verdict=1
  fi
done
if ((verdict == 0)); then
  say "PROVEN: offline-deps, configure and build passed in a minbase Debian 12 chroot with no network"
else
  say "NOT PROVEN: see $WORK/out/*.log"
fi
exit "$verdict"
