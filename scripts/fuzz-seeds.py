#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/) from the
golden fixtures captured from real clients (protocol/tests/fixtures/).

Run from the repository root; the output is checked in, so this only needs to
run again when the fixtures change.
"""
import hashlib
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts" / "capture"))
import capture_server as cs  # noqa: E402  (the capture tool's record encoder)

FIXTURES = ROOT / "protocol" / "tests" / "fixtures"
CORPUS = ROOT / "fuzz" / "corpus"


def put(target: str, data: bytes) -> None:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def main() -> int:
    frames = []
    for hex_file in sorted(FIXTURES.glob("*.hex")):
        frame = bytes.fromhex("".join(hex_file.read_text().split()))
        frames.append(frame)
        put("frame", frame)
        header_len = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
        serialize_type = frame[4]
        header = frame[8:8 + header_len]
        body = frame[8 + header_len:]
        put("header", bytes([serialize_type]) + header)
        if "-320-" in hex_file.name:
            put("batch", body)
        if body[:1] == b"{":
            put("json", body)
        if serialize_type == 0:
            put("json", header)
    # Several frames back to back, and a frame cut short.
    put("frame", frames[0] + frames[1] + frames[2])
    put("frame", frames[3][: len(frames[3]) // 2])
    for i, props in enumerate(["", "KEYS\x01k1 k2\x02TAGS\x01TagA\x02UNIQ_KEY\x01AB\x02"]):
        record = cs.encode_record(
            topic="TopicTest", queue_id=i, flag=0, queue_offset=7 + i, phys_offset=4096 * i,
            sys_flag=0, born_ts=1_700_000_000_000, born_host=("127.0.0.1", 50000),
            store_ts=1_700_000_000_123, store_host=("127.0.0.1", 10911), reconsume=0,
            body=b"hello ringmq" * (i + 1), properties=props)
        put("record", record)
    put("record", (16).to_bytes(4, "big") + (0xCBD43194).to_bytes(4, "big") + bytes(8))
    put("json", json.dumps({"brokerAddrs": {"0": "127.0.0.1:10911"}}).encode())
    put("json", b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":5}},'
                b'"x":{0:1,-1:2}}')
    return 0


if __name__ == "__main__":
    sys.exit(main())
