#!/usr/bin/env bash
# Renders a `tessera replay` HTML report in headless Chromium and checks what a person would see: the browser
# exits 0, the page logs no console error, and the screenshot is not blank.
#   render_report.sh TESSERA PNG_CHECK WORK_DIR TRACE...
# Exit status 77 (CTest's skip) when Chromium is not installed.
set -uo pipefail

tessera=$1 png_check=$2 work=$3
shift 3

browser=""
for candidate in "${CHROMIUM:-}" chromium chromium-browser google-chrome; do
  if [[ -n "$candidate" ]] && command -v "$candidate" >/dev/null 2>&1; then browser=$candidate; break; fi
done
if [[ -z "$browser" ]]; then
  echo "SKIPPED: Chromium is not installed (Debian: apt-get install chromium; or set CHROMIUM)"
  exit 77
fi

rm -rf "$work" && mkdir -p "$work" || exit 1
report="$work/report.html" shot="$work/screenshot.png" log="$work/chromium.log"
if ! "$tessera" replay "$@" --min-capacity --html "$report"; then
  echo "FAILED: tessera replay did not write the report"
  exit 1
fi

profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$profile" \
  --enable-logging=stderr --v=0 --screenshot="$shot" --window-size=1200,900 "file://$report" >"$log" 2>&1
status=$?
echo "$browser exited with $status; its log is $log"
if ((status != 0)); then
  tail -n 20 "$log"
  echo "FAILED: the browser exited with $status"
  exit 1
fi

# The page's own messages: console output (any level: the page has no script, so any is a fault) and
# uncaught exceptions. The browser's own noise (D-Bus, GPU) is not the page's.
if grep -E "CONSOLE|Uncaught" "$log"; then
  echo "FAILED: the page logged to the console"
  exit 1
fi

if [[ ! -s "$shot" ]]; then
  echo "FAILED: no screenshot"
  exit 1
fi
"$png_check" "$shot" || { echo "FAILED: the screenshot looks blank or cannot be read"; exit 1; }
echo "the report renders: $report"
