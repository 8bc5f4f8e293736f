# Shared by scripts/demo.sh and scripts/test.sh: install what the build needs (Debian packages, once),
# then configure and build into build/. Idempotent: a second run installs nothing and rebuilds only
# what changed.
set -euo pipefail

TESSERA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESSERA_BUILD="${TESSERA_BUILD:-$TESSERA_ROOT/build}"

TESSERA_PACKAGES=(
  cmake ninja-build g++ pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libfmt-dev libcli11-dev nlohmann-json3-dev zlib1g-dev libboost-dev
  chromium
  libtorch-dev python3-torch  # PyTorch on Tessera: torch_cpu/ and tests/python (docs/pytorch.md)
  python3-venv python3-pip python3-setuptools python3-wheel  # pip install . offline (pyproject.toml, setup.py)
)

tessera_install_packages() {
  local missing=()
  for package in "${TESSERA_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  if ((${#missing[@]} > 0)); then
    echo "tessera: installing ${missing[*]}" >&2
    local sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

tessera_build() {
  cmake -S "$TESSERA_ROOT" -B "$TESSERA_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_WERROR=ON >/dev/null
  cmake --build "$TESSERA_BUILD" --parallel "$(nproc)"
}
