#!/usr/bin/env bash
# The README's test command: install, build (warnings are errors), run every test with CTest.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
tessera_install_packages
tessera_build
cd "$TESSERA_BUILD"
exec ctest --output-on-failure --parallel "$(nproc)" --timeout 300
