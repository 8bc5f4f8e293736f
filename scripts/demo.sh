#!/usr/bin/env bash
# The README's main job: install, build, and run `tessera demo` on its built-in default.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
tessera_install_packages
tessera_build
exec "$TESSERA_BUILD/tools/tessera" demo "$@"
