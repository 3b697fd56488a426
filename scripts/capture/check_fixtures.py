#!/usr/bin/env python3
"""Sanity-check protocol/tests/fixtures/: every .hex is one well-formed remoting frame.

Checks per `<client>-<code>-<NAME>[-variant].hex`: lower-case hex with at most 64 bytes per
line; the length word equals the byte count minus 4; the header length fits; the header is
JSON (type 0) or a decodable ROCKETMQ header (type 1); its `code` equals the code in the file
name; its `language` matches the client prefix; a `.note` sidecar exists. Prints one summary
line per fixture (the facts a golden test asserts) and exits non-zero on the first failure.

Usage: check_fixtures.py [FIXTURES_DIR]   (default: protocol/tests/fixtures next to this repo)
Python 3.11, standard library only.
"""

from __future__ import annotations

import glob
import json
import os
import re
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import capture_server  # noqa: E402  (same directory; provides the header decoders)

NAME_RE = re.compile(r"^(?P<client>[a-z]+)-(?P<code>\d+)-(?P<label>[A-Z0-9_]+(?:-[a-z0-9-]+)?)\.hex$")
LANGUAGE = {"java": "JAVA", "rust": "RUST"}


def check(path: str) -> str:
    name = os.path.basename(path)
    m = NAME_RE.match(name)
    if not m:
        raise ValueError(f"{name}: name does not match <client>-<code>-<NAME>[-variant].hex")
    with open(path, encoding="ascii") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if not re.fullmatch(r"[0-9a-f]+", line) or len(line) % 2 or len(line) > 128:
            raise ValueError(f"{name}: line {i + 1} is not lower-case hex of <= 64 bytes")
        if i < len(lines) - 1 and len(line) != 128:
            raise ValueError(f"{name}: line {i + 1} is short but not the last line")
    frame = bytes.fromhex("".join(lines))
    stype, header, body, _text = capture_server.decode_frame(frame)
    if int(header.get("code", -1)) != int(m["code"]):
        raise ValueError(f"{name}: header code {header.get('code')} != {m['code']}")
    want = LANGUAGE.get(m["client"])
    if want and header.get("language") != want:
        raise ValueError(f"{name}: language {header.get('language')} != {want}")
    if not os.path.exists(path[:-4] + ".note"):
        raise ValueError(f"{name}: missing .note sidecar")
    hlen = struct.unpack_from(">I", frame, 4)[0] & 0xFFFFFF
    ext = header.get("extFields")
    keys = ",".join(ext.keys()) if isinstance(ext, dict) else "-"
    return (f"{name}: {len(frame)} B, type {stype}, header {hlen} B, body {len(body)} B, "
            f"code {header.get('code')}, flag {header.get('flag')}, opaque {header.get('opaque')}, "
            f"version {header.get('version')}, ext [{keys}]")


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    fixtures = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "protocol", "tests", "fixtures")
    paths = sorted(glob.glob(os.path.join(fixtures, "*.hex")))
    if not paths:
        print(f"check_fixtures: no .hex files in {fixtures}", file=sys.stderr)
        return 1
    for path in paths:
        try:
            print(check(path))
        except (ValueError, capture_server.ProtocolError, json.JSONDecodeError, struct.error) as e:
            print(f"check_fixtures: FAIL {e}", file=sys.stderr)
            return 1
    print(f"check_fixtures: {len(paths)} fixtures OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
