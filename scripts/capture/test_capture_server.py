#!/usr/bin/env python3
"""Unit tests for capture_server.py's codecs (stdlib unittest).

Run: python3 -m unittest discover -s scripts/capture -p 'test_*.py'
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import tempfile
import threading
import unittest
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import capture_server as cs  # noqa: E402


# The worked example of remoting-protocol.md section 1.5 (GET_ROUTEINFO_BY_TOPIC, binary header).
BINARY_ROUTE_FRAME = bytes.fromhex(
    "0000002d" "01000029"
    "0069" "00" "01df" "00000007" "00000000"
    "00000000"
    "00000014"
    "0005" "746f706963" "00000009" "546f70696354657374"
)


class FrameCodecTests(unittest.TestCase):
    def test_decode_frame_reads_the_documented_binary_header_example(self) -> None:
        stype, header, body, _ = cs.decode_frame(BINARY_ROUTE_FRAME)
        self.assertEqual(stype, cs.SERIALIZE_ROCKETMQ)
        self.assertEqual(header, {"code": 105, "language": "JAVA", "version": 479, "opaque": 7,
                                  "flag": 0, "extFields": {"topic": "TopicTest"}})
        self.assertEqual(body, b"")

    def test_decode_frame_reads_a_json_header_and_body(self) -> None:
        raw = b'{"code":310,"flag":0,"opaque":3}'
        frame = struct.pack(">II", 4 + len(raw) + 2, len(raw)) + raw + b"hi"
        stype, header, body, text = cs.decode_frame(frame)
        self.assertEqual((stype, header["code"], body, text), (0, 310, b"hi", raw.decode()))

    def test_decode_frame_rejects_a_header_longer_than_the_frame(self) -> None:
        frame = struct.pack(">II", 8, 100) + b"{}\x00\x00"
        with self.assertRaises(cs.ProtocolError):
            cs.decode_frame(frame)

    def test_encode_response_is_sorted_json_with_string_ext_fields(self) -> None:
        frame = cs.encode_response(9, 0, {"queueId": 1, "msgId": "AB"}, "FOUND", b"xyz")
        stype, header, body, text = cs.decode_frame(frame)
        self.assertEqual(stype, 0)
        self.assertEqual(body, b"xyz")
        self.assertEqual(header["extFields"], {"queueId": "1", "msgId": "AB"})
        self.assertEqual(header["flag"], 1)
        self.assertEqual(header["version"], cs.BROKER_VERSION)
        self.assertEqual(list(json.loads(text)), sorted(json.loads(text)))

    def test_hex_lines_hold_64_bytes_each(self) -> None:
        lines = cs.to_hex_lines(bytes(range(130))).splitlines()
        self.assertEqual([len(line) for line in lines], [128, 128, 4])
        self.assertEqual(bytes.fromhex("".join(lines)), bytes(range(130)))


class MessageCodecTests(unittest.TestCase):
    def test_encode_record_has_documented_size_and_masked_body_crc(self) -> None:
        body = b"hello"
        props = cs.format_properties([("TAGS", "TagA")])
        rec = cs.encode_record(topic="T1", queue_id=2, flag=7, queue_offset=5, phys_offset=1024,
                               sys_flag=0, born_ts=11, born_host=("127.0.0.1", 4000), store_ts=12,
                               store_host=("127.0.0.1", 10911), reconsume=0, body=body,
                               properties=props)
        self.assertEqual(len(rec), 91 + len(body) + 2 + len(props))
        total, magic, crc, qid, flag, qoff, phys = struct.unpack_from(">iiiiiqq", rec, 0)
        self.assertEqual((total, magic, qid, flag, qoff, phys), (len(rec), cs.MAGIC_V1, 2, 7, 5, 1024))
        self.assertEqual(crc, zlib.crc32(body) & 0x7FFFFFFF)
        self.assertEqual(struct.unpack_from(">i", rec, 84)[0], len(body))
        self.assertEqual(rec[88:93], body)

    def test_batch_body_round_trips_through_parse_batch_body(self) -> None:
        def short(body: bytes, props: str) -> bytes:
            p = props.encode()
            return struct.pack(">iiiii", 20 + len(body) + 2 + len(p), 0, 0, 0, len(body)) + body + \
                struct.pack(">h", len(p)) + p
        data = short(b"a", "KEYS\x01k1\x02") + short(b"bb", "TAGS\x01TagB\x02")
        msgs = cs.parse_batch_body(data)
        self.assertEqual([m["body"] for m in msgs], [b"a", b"bb"])
        self.assertEqual(cs.parse_properties(msgs[1]["properties"]), [("TAGS", "TagB")])

    def test_parse_batch_body_rejects_an_inconsistent_total_size(self) -> None:
        bad = struct.pack(">iiiii", 99, 0, 0, 0, 1) + b"a" + struct.pack(">h", 0)
        with self.assertRaises(cs.ProtocolError):
            cs.parse_batch_body(bad)

    def test_java_hash_matches_documented_tag_codes(self) -> None:
        self.assertEqual(cs.java_hash("TagA"), 2598919)
        self.assertEqual(cs.java_hash("*"), 42)
        self.assertEqual(cs.java_hash("中文"), 646394)

    def test_offset_msg_id_is_upper_case_ip_port_offset(self) -> None:
        self.assertEqual(cs.Store(10911).offset_msg_id(1024), "7F00000100002A9F0000000000000400")


class ServerTests(unittest.TestCase):
    """One request over a real loopback socket: route query and a one-way offset update."""

    def test_server_answers_route_query_and_records_but_ignores_one_way(self) -> None:
        with tempfile.TemporaryDirectory() as out:
            ports = []
            for _ in range(2):
                s = socket.socket()
                s.bind(("127.0.0.1", 0))
                ports.append(s.getsockname()[1])
                s.close()
            app = cs.App(out, ports[0], ports[1])
            servers = [cs.make_server(app, ports[0], "namesrv"), cs.make_server(app, ports[1], "broker")]
            for srv in servers:
                threading.Thread(target=srv.serve_forever, daemon=True).start()
            try:
                def frame(header: dict) -> bytes:
                    raw = json.dumps(header).encode()
                    return struct.pack(">II", 4 + len(raw), len(raw)) + raw

                with socket.create_connection(("127.0.0.1", ports[0]), 5) as c:
                    c.sendall(frame({"code": 105, "flag": 0, "opaque": 5, "language": "JAVA",
                                     "extFields": {"topic": "T"}}))
                    (n,) = struct.unpack(">I", c.recv(4, socket.MSG_WAITALL))
                    _, header, body, _ = cs.decode_frame(struct.pack(">I", n) + c.recv(n, socket.MSG_WAITALL))
                self.assertEqual((header["code"], header["opaque"], header["flag"]), (0, 5, 1))
                route = json.loads(body)
                self.assertEqual(route["brokerDatas"][0]["brokerAddrs"], {"0": f"127.0.0.1:{ports[1]}"})
                self.assertEqual(route["queueDatas"][0]["perm"], 6)

                with socket.create_connection(("127.0.0.1", ports[1]), 5) as c:
                    c.sendall(frame({"code": 15, "flag": 2, "opaque": 6, "language": "JAVA",
                                     "extFields": {"consumerGroup": "g", "topic": "T",
                                                   "queueId": "0", "commitOffset": "3"}}))
                    c.sendall(frame({"code": 14, "flag": 0, "opaque": 7, "language": "JAVA",
                                     "extFields": {"consumerGroup": "g", "topic": "T", "queueId": "0"}}))
                    (n,) = struct.unpack(">I", c.recv(4, socket.MSG_WAITALL))
                    _, header, _, _ = cs.decode_frame(struct.pack(">I", n) + c.recv(n, socket.MSG_WAITALL))
                # The first answer on this connection belongs to the query: the one-way got none.
                self.assertEqual((header["opaque"], header["extFields"]["offset"]), (7, "3"))
            finally:
                for srv in servers:
                    srv.shutdown()
                    srv.server_close()
                app.recorder.close()
            names = sorted(os.listdir(out))
            self.assertIn("java-01-GET_ROUTEINFO_BY_TOPIC.hex", names)
            self.assertIn("java-02-UPDATE_CONSUMER_OFFSET-oneway.hex", names)


if __name__ == "__main__":
    unittest.main()
