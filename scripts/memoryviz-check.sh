#!/usr/bin/env bash
# Opens a PyTorch snapshot that Tessera wrote in PyTorch's own viewer, MemoryViz, in headless Chromium, offline,
# and checks what it draws: "Active Memory Timeline", "Allocator State History" and "Active Cached Segment
# Timeline" render without a JavaScript error, and in the Allocator State History the reserved bytes the viewer
# computes at a dozen events spread over the trace are what the snapshot's segment entries add up to there, and
# not all the same where the entries change (the reserved line is no longer flat; a trace within one page is).
#
#   scripts/memoryviz-check.sh MEMORYVIZ_JS SNAPSHOT [OUT_DIR]
#
# MEMORYVIZ_JS is PyTorch's torch/utils/viz/MemoryViz.js (the code behind pytorch.org/memory_viz). It is NOT in
# this repository and Tessera does not ship it: fetch it yourself from a PyTorch checkout or release, or copy it
# from an installed PyTorch recent enough to have it (Debian 12's python3-torch 1.13 predates it). Its d3 imports
# point at a CDN; they are replaced by the d3 v5 bundle of Debian's node-d3 (apt-get install node-d3), or the
# file D3_JS names. SNAPSHOT may be gzipped (.gz). OUT_DIR (default: a temporary directory) receives the pages,
# a screenshot and a JSON report per view (timeline, state, segments: .html, .png, .json). Not run in CI: the
# viewer is not at hand there; the CI test tests/replay/replay_snapshot_test.cpp pins the segment entries this
# checks.
# Exit status: 0 the checks pass, 1 they fail, 2 a missing tool or file.
set -uo pipefail

if (($# < 2)); then
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
memoryviz=$1 snapshot=$2
out=${3:-$(mktemp -d /tmp/memoryviz-check.XXXXXX)}
d3=${D3_JS:-/usr/share/nodejs/d3/dist/d3.js}

browser=""
for candidate in "${CHROMIUM:-}" chromium chromium-browser google-chrome; do
  if [[ -n "$candidate" ]] && command -v "$candidate" >/dev/null 2>&1; then browser=$candidate; break; fi
done
[[ -n "$browser" ]] || { echo "memoryviz-check: Chromium is not installed (Debian: apt-get install chromium)"; exit 2; }
[[ -f "$memoryviz" ]] || { echo "memoryviz-check: no MemoryViz.js at $memoryviz (fetch it from PyTorch: see the top of $0)"; exit 2; }
[[ -f "$d3" ]] || { echo "memoryviz-check: no d3 v5 bundle at $d3 (apt-get install node-d3, or set D3_JS)"; exit 2; }
[[ -f "$snapshot" ]] || { echo "memoryviz-check: no snapshot at $snapshot"; exit 2; }
command -v python3 >/dev/null || { echo "memoryviz-check: python3 is needed to build the pages"; exit 2; }
mkdir -p "$out" || exit 2
# Chromium opens the pages by file:// URL, which must name an absolute path.
out=$(cd "$out" && pwd) || exit 2

# One page per view: d3 as a classic script, MemoryViz inline as a module (a module from file:// is refused),
# its imports replaced by d3's global, the snapshot inline as base64 as PyTorch's own _memory_viz.py embeds it,
# and a driver that writes what it found into <pre id="tessera-check">.
python3 - "$memoryviz" "$snapshot" "$d3" "$out" <<'PYTHON' || exit 2
import base64, gzip, json, pathlib, re, sys

memoryviz, snapshot, d3, out = sys.argv[1:]
code = pathlib.Path(memoryviz).read_text()
imports = re.findall(r'^import .*? from "[^"]*";\n', code, flags=re.M)
if not imports:
    sys.exit(f"memoryviz-check: {memoryviz} has no import lines: is it MemoryViz.js?")
code = code.replace("".join(imports), "const d3 = window.d3;\nconst {axisLeft, scaleLinear, zoom, zoomIdentity, brushX} = window.d3;\n")
data = pathlib.Path(snapshot).read_bytes()
if data[:2] == b"\x1f\x8b":
    data = gzip.decompress(data)
encoded = base64.b64encode(data).decode()

DRIVER = r"""
const tessera_errors = [];
window.addEventListener('error', e => tessera_errors.push(String(e.message)));
window.addEventListener('unhandledrejection', e => tessera_errors.push(String(e.reason)));
function tessera_report(result) {
  result.errors = tessera_errors;
  const pre = document.createElement('pre');
  pre.id = 'tessera-check';
  pre.textContent = JSON.stringify(result);
  document.body.appendChild(pre);
}
function tessera_delta(e) {
  if (e.action === 'segment_alloc' || e.action === 'segment_map') return e.size;
  if (e.action === 'segment_free' || e.action === 'segment_unmap') return -e.size;
  return 0;
}
try {
  add_local_files([{name: 'snapshot', base64: SNAPSHOT_BASE64}], VIEW);
} catch (e) {
  tessera_errors.push(String(e));
}
setTimeout(() => {
  const result = {view: VIEW, polygons: document.querySelectorAll('polygon').length,
                  rects: document.querySelectorAll('rect').length};
  try {
    const snapshot = snapshot_cache['snapshot'];
    const events = snapshot.device_traces[0] || [];
    result.events = events.length;
    result.segment_entries = events.filter(e => e.action.startsWith('segment')).length;
    if (VIEW === 'Allocator State History' && events.length > 0) {
      // What the entries add up to after each event, counted back from the segments at the end.
      const final_reserved = snapshot.segments.reduce((sum, s) => sum + s.total_size, 0);
      const expected = new Array(events.length);
      let after = final_reserved;
      for (let i = events.length - 1; i >= 0; i--) {
        expected[i] = after;
        after -= tessera_delta(events[i]);
      }
      const outer = [...document.querySelectorAll('div')].find(d => d.style.gridTemplateRows === '2fr 1fr');
      const stack = outer.querySelector(':scope > pre');
      const rows = outer.querySelector(':scope > div').children;
      const picks = new Set([events.length - 1]);
      for (let k = 0; k < 12; k++) picks.add(Math.floor((k * (events.length - 1)) / 11));
      result.samples = [];
      for (const idx of [...picks].sort((a, b) => a - b)) {
        rows[idx].dispatchEvent(new MouseEvent('mousedown', {bubbles: true}));
        const numbers = [...stack.textContent.matchAll(/\((\d+) bytes\)/g)].map(m => Number(m[1]));
        result.samples.push({event: idx, action: events[idx].action, allocated: numbers[0], reserved: numbers[1],
                             expected: expected[idx]});
      }
    }
  } catch (e) {
    tessera_errors.push(String(e && e.stack ? e.stack : e));
  }
  tessera_report(result);
}, 2000);
"""

views = {"timeline": "Active Memory Timeline", "state": "Allocator State History",
         "segments": "Active Cached Segment Timeline"}
for key, view in views.items():
    driver = DRIVER.replace("SNAPSHOT_BASE64", json.dumps(encoded)).replace("VIEW", json.dumps(view))
    page = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>MemoryViz: {view}</title></head><body>\n'
            f'<script src="file://{pathlib.Path(d3).resolve()}"></script>\n'
            f'<script type="module">\n{code}\n{driver}\n</script>\n</body></html>\n')
    (pathlib.Path(out) / f"{key}.html").write_text(page)
PYTHON

profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
flags=(--headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking --disable-component-update
       --disable-sync --user-data-dir="$profile" --allow-file-access-from-files --window-size=1400,1000
       --virtual-time-budget=30000 --enable-logging=stderr --v=0)
status=0
for key in timeline state segments; do
  page="$out/$key.html"
  timeout 180 "$browser" "${flags[@]}" --dump-dom "file://$page" >"$out/$key.dom" 2>"$out/$key.log"
  timeout 180 "$browser" "${flags[@]}" --screenshot="$out/$key.png" "file://$page" >/dev/null 2>>"$out/$key.log"
  python3 - "$out/$key.dom" "$out/$key.log" "$out/$key.json" <<'PYTHON' || status=1
import html, json, re, sys

dom, log, report = sys.argv[1:]
found = re.search(r'<pre id="tessera-check">(.*?)</pre>', open(dom, errors="replace").read(), flags=re.S)
if not found:
    print(f"FAILED: the page never reported (see {log})")
    sys.exit(1)
result = json.loads(html.unescape(found.group(1)))
console = [line for line in open(log, errors="replace") if "Uncaught" in line or ":ERROR:CONSOLE" in line]
result["console_errors"] = console
json.dump(result, open(report, "w"), indent=1)
problems = list(result["errors"]) + console
print(f'{result["view"]}: {result["events"]} events ({result["segment_entries"]} segment entries), '
      f'{result["polygons"]} polygons, {result["rects"]} rectangles drawn')
samples = result.get("samples", [])
for sample in samples:
    print(f'  event {sample["event"]:6} {sample["action"]:15} allocated {sample["allocated"]:>12} '
          f'reserved {sample["reserved"]:>12} (the entries: {sample["expected"]})')
    if sample["reserved"] != sample["expected"]:
        problems.append(f'event {sample["event"]}: MemoryViz shows {sample["reserved"]} reserved, the entries add up '
                        f'to {sample["expected"]}')
# Flat is wrong only where the entries say the memory held changed (a trace that fits one page stays flat).
if samples and len({sample["reserved"] for sample in samples}) == 1 and \
        len({sample["expected"] for sample in samples}) > 1:
    problems.append("the reserved bytes are the same at every sampled event: flat")
if result["view"] != "Allocator State History" and result["polygons"] == 0:
    problems.append("nothing drawn")
for problem in problems:
    print(f"  FAILED: {problem.strip()}")
sys.exit(1 if problems else 0)
PYTHON
done
echo "pages, screenshots and JSON reports: $out"
((status == 0)) && echo "MemoryViz draws the snapshot: no error, reserved bytes as the segment entries say" || echo "FAILED"
exit $status
