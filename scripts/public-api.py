#!/usr/bin/env python3
"""Lists the crate's public API from rustdoc HTML, one line per item or member signature,
sorted, so two builds can be diffed (a stand-in for cargo-public-api, which needs nightly).
The listing is committed as docs/public-api.txt; scripts/check-layers.sh fails when the
API differs from it.

Usage: cargo doc --no-deps --all-features && python3 scripts/public-api.py > docs/public-api.txt
(the argument, if any, is the crate's doc directory; by default
$CARGO_TARGET_DIR/doc/quorum_lock, or target/doc/quorum_lock)
"""
import html
import os
import pathlib
import re
import sys

default = pathlib.Path(os.environ.get("CARGO_TARGET_DIR") or "target") / "doc" / "quorum_lock"
root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else default
if not root.is_dir():
    sys.exit(f"public-api.py: no rustdoc output at {root} (run cargo doc first)")
TAG = re.compile(r"<[^>]+>")
BLOCKS = [
    re.compile(r'<pre class="rust item-decl"><code>(.*?)</code></pre>', re.S),
    re.compile(r'<h[34] class="code-header">(.*?)</h[34]>', re.S),
]


def text(fragment: str) -> str:
    plain = html.unescape(TAG.sub("", fragment))
    plain = re.sub(r"Show \d+ (fields|variants|methods)", "", plain)
    return " ".join(plain.split())


lines = set()
for page in sorted(root.rglob("*.html")):
    rel = page.relative_to(root).as_posix()
    if rel.startswith(("src/", "search", "settings", "help", "all.html")) or page.name == "sidebar-items.js":
        continue
    body = page.read_text(errors="replace")
    if 'http-equiv="refresh"' in body:
        continue  # redirect stubs
    for pattern in BLOCKS:
        for m in pattern.finditer(body):
            sig = text(m.group(1))
            if sig:
                lines.add(f"{rel}: {sig}")
for line in sorted(lines):
    print(line)
