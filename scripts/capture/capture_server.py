#!/usr/bin/env python3
"""Fake RocketMQ name server + broker that records every request frame it receives.

Purpose: capture golden wire fixtures from real RocketMQ clients (the Java client and
rocketmq-client-rust). It speaks just enough of the remoting protocol
(/work/shared/docs/remoting-protocol.md) for a client to run a produce / pull / offset
scenario: route data, heartbeat, send (single and batch), pull (with real stored records),
consumer offsets, max/min offsets, consumer list, lock, unregister. Unknown request codes get
REQUEST_CODE_NOT_SUPPORTED (3); one-way requests are never answered. Answers are always JSON
(serialize type 0), as a Java broker answers.

Usage:
    capture_server.py --namesrv-port N --broker-port B --out DIR [--max-seconds S]

Binds 127.0.0.1 only. Output in DIR:
    <client>-<nn>-<CODE_NAME>[-variant].hex   first frame of each (code, variant) per client
                                              (variant -binary: ROCKETMQ binary header),
                                              the whole frame incl. the length word, lower-case
                                              hex, 64 bytes per line
    <same name>.json                          decoded header, body summary, the answer sent
    all/<client>-<seq>-<CODE_NAME>.hex        every received frame (capped per client)
    answers.log                               one line per received frame and what was answered
    index.json                                list of the selected frames, written at exit

The client label is the lower-cased `language` of the request header (JAVA -> java,
RUST -> rust), so several clients can be captured by one server run.
Python 3.11, standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
import zlib

# ---------------------------------------------------------------------------------------------
# Protocol constants (remoting-protocol.md sections 1, 2, 4)
# ---------------------------------------------------------------------------------------------

#: Largest frame accepted (Java default `com.rocketmq.remoting.frameMaxLength`).
MAX_FRAME_LEN = 16 * 1024 * 1024
#: Version ordinal we answer with (V5_3_3).
BROKER_VERSION = 479
#: Flag bits of RemotingCommand.
FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2
#: Serialize types (high byte of the header-length word).
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1
#: Stored record magic (V1) and layout constants (section 4.1).
MAGIC_V1 = -626843481
#: Pull sysFlag bits.
PULL_COMMIT_OFFSET = 0x1
PULL_SUSPEND = 0x2
#: How long a suspended pull that found nothing is held before PULL_NOT_FOUND (ms).
PULL_HOLD_MS = 1000
#: Every-frame copies kept per client in all/ (the selected first-occurrences are unlimited).
MAX_ALL_FRAMES_PER_CLIENT = 400
#: Hex line width of the .hex files, in bytes.
HEX_BYTES_PER_LINE = 64

BROKER_NAME = "broker-a"
CLUSTER_NAME = "DefaultCluster"
REGION = "DefaultRegion"

REQUEST_CODES = {
    10: "SEND_MESSAGE",
    11: "PULL_MESSAGE",
    12: "QUERY_MESSAGE",
    14: "QUERY_CONSUMER_OFFSET",
    15: "UPDATE_CONSUMER_OFFSET",
    17: "UPDATE_AND_CREATE_TOPIC",
    21: "GET_ALL_TOPIC_CONFIG",
    26: "GET_BROKER_CONFIG",
    28: "GET_BROKER_RUNTIME_INFO",
    29: "SEARCH_OFFSET_BY_TIMESTAMP",
    30: "GET_MAX_OFFSET",
    31: "GET_MIN_OFFSET",
    32: "GET_EARLIEST_MSG_STORETIME",
    33: "VIEW_MESSAGE_BY_ID",
    34: "HEART_BEAT",
    35: "UNREGISTER_CLIENT",
    36: "CONSUMER_SEND_MSG_BACK",
    37: "END_TRANSACTION",
    38: "GET_CONSUMER_LIST_BY_GROUP",
    39: "CHECK_TRANSACTION_STATE",
    40: "NOTIFY_CONSUMER_IDS_CHANGED",
    41: "LOCK_BATCH_MQ",
    42: "UNLOCK_BATCH_MQ",
    46: "CHECK_CLIENT_CONFIG",
    100: "PUT_KV_CONFIG",
    101: "GET_KV_CONFIG",
    103: "REGISTER_BROKER",
    104: "UNREGISTER_BROKER",
    105: "GET_ROUTEINFO_BY_TOPIC",
    106: "GET_BROKER_CLUSTER_INFO",
    206: "GET_ALL_TOPIC_LIST_FROM_NAMESERVER",
    207: "DELETE_SUBSCRIPTIONGROUP",
    307: "GET_CONSUMER_RUNNING_INFO",
    310: "SEND_MESSAGE_V2",
    320: "SEND_BATCH_MESSAGE",
    324: "SEND_REPLY_MESSAGE",
    325: "SEND_REPLY_MESSAGE_V2",
    351: "GET_TOPIC_CONFIG",
    361: "LITE_PULL_MESSAGE",
    400: "QUERY_ASSIGNMENT",
    401: "SET_MESSAGE_REQUEST_MODE",
    904: "BROKER_HEARTBEAT",
    200050: "POP_MESSAGE",
    200051: "ACK_MESSAGE",
    200053: "CHANGE_MESSAGE_INVISIBLETIME",
}

LANGUAGES = [
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER",
    "HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS",
]

#: SendMessageRequestHeaderV2 one-letter keys -> long names (section 2.3.2).
V2_KEYS = {
    "a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
    "e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties",
    "j": "reconsumeTimes", "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch",
    "n": "brokerName",
}


def code_name(code: int) -> str:
    """Name of a request code, or CODE_<n> when unknown."""
    return REQUEST_CODES.get(code, f"CODE_{code}")


# ---------------------------------------------------------------------------------------------
# Frame and header codec
# ---------------------------------------------------------------------------------------------

class ProtocolError(Exception):
    """A frame or header that cannot be decoded."""


def decode_rocketmq_header(data: bytes) -> dict:
    """Decode the ROCKETMQ binary header (section 1.5) into the JSON header's shape."""
    if len(data) < 21:
        raise ProtocolError(f"binary header too short: {len(data)}")
    code, lang, version, opaque, flag, remark_len = struct.unpack_from(">hBhiii", data, 0)
    pos = 17
    if remark_len < 0 or pos + remark_len > len(data):
        raise ProtocolError("bad remark length")
    header: dict = {
        "code": code,
        "language": LANGUAGES[lang] if lang < len(LANGUAGES) else f"LANG_{lang}",
        "version": version,
        "opaque": opaque,
        "flag": flag,
    }
    if remark_len:
        header["remark"] = data[pos:pos + remark_len].decode("utf-8", "replace")
    pos += remark_len
    (ext_len,) = struct.unpack_from(">i", data, pos)
    pos += 4
    end = pos + ext_len
    if ext_len < 0 or end > len(data):
        raise ProtocolError("bad extFields length")
    if ext_len:
        ext = {}
        while pos < end:
            (klen,) = struct.unpack_from(">h", data, pos)
            pos += 2
            key = data[pos:pos + klen].decode("utf-8", "replace")
            pos += klen
            (vlen,) = struct.unpack_from(">i", data, pos)
            pos += 4
            ext[key] = data[pos:pos + vlen].decode("utf-8", "replace")
            pos += vlen
        header["extFields"] = ext
    return header


def decode_frame(frame: bytes) -> tuple[int, dict, bytes, str]:
    """Split a whole frame (with its length word) into (serialize type, header, body, header text)."""
    if len(frame) < 8:
        raise ProtocolError("frame shorter than 8 bytes")
    (length, word) = struct.unpack_from(">II", frame, 0)
    if length != len(frame) - 4:
        raise ProtocolError(f"length word {length} != {len(frame) - 4}")
    stype = word >> 24
    hlen = word & 0xFFFFFF
    if hlen > length - 4:
        raise ProtocolError(f"header length {hlen} exceeds frame")
    raw = frame[8:8 + hlen]
    body = frame[8 + hlen:]
    if stype == SERIALIZE_JSON:
        text = raw.decode("utf-8")
        header = json.loads(text)
        if not isinstance(header, dict):
            raise ProtocolError("JSON header is not an object")
    elif stype == SERIALIZE_ROCKETMQ:
        header = decode_rocketmq_header(raw)
        text = json.dumps(header)
    else:
        raise ProtocolError(f"unknown serialize type {stype}")
    return stype, header, body, text


def ext_str(ext: dict, key: str, default: str | None = None) -> str | None:
    """An extFields value as text (values may be numbers or booleans from some clients)."""
    value = ext.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def ext_int(ext: dict, key: str, default: int = 0) -> int:
    """An extFields value as an integer, `default` when absent or malformed."""
    value = ext_str(ext, key)
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def encode_response(opaque: int, code: int, ext: dict | None = None, remark: str | None = None,
                    body: bytes = b"") -> bytes:
    """A JSON response frame shaped like a Java broker's (sorted members, string extFields)."""
    header: dict = {
        "code": code,
        "flag": FLAG_RESPONSE,
        "language": "JAVA",
        "opaque": opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": BROKER_VERSION,
    }
    if ext:
        header["extFields"] = {k: str(v) for k, v in ext.items()}
    if remark is not None:
        header["remark"] = remark
    raw = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return struct.pack(">II", 4 + len(raw) + len(body), len(raw)) + raw + body


# ---------------------------------------------------------------------------------------------
# Message store model (section 4)
# ---------------------------------------------------------------------------------------------

def parse_properties(text: str) -> list[tuple[str, str]]:
    """Parse `k\\x01v\\x02...` keeping order (section 4.6)."""
    pairs = []
    for seg in text.split("\x02"):
        sep = seg.find("\x01")
        if len(seg) >= 3 and 0 < sep < len(seg) - 1:
            pairs.append((seg[:sep], seg[sep + 1:]))
    return pairs


def format_properties(pairs: list[tuple[str, str]]) -> str:
    """Inverse of parse_properties, with the trailing separator Java writes."""
    return "".join(f"{k}\x01{v}\x02" for k, v in pairs)


def java_hash(text: str) -> int:
    """Java String.hashCode over UTF-16 code units (section 4.12)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def ipv4_bytes(host: str) -> bytes:
    """4 address bytes of an IPv4 literal; loopback for anything else."""
    try:
        return socket.inet_aton(host)
    except OSError:
        return socket.inet_aton("127.0.0.1")


def encode_record(*, topic: str, queue_id: int, flag: int, queue_offset: int, phys_offset: int,
                  sys_flag: int, born_ts: int, born_host: tuple[str, int], store_ts: int,
                  store_host: tuple[str, int], reconsume: int, body: bytes, properties: str) -> bytes:
    """A V1 / IPv4 stored message record exactly as in the CommitLog (section 4.1)."""
    topic_b = topic.encode("utf-8")
    props_b = properties.encode("utf-8")
    if len(topic_b) > 127 or len(props_b) > 32767:
        raise ProtocolError("topic or properties too long for a V1 record")
    total = 91 + len(body) + len(topic_b) + len(props_b)
    crc = zlib.crc32(body) & 0x7FFFFFFF
    out = struct.pack(">iiiiiqqiq", total, MAGIC_V1, crc, queue_id, flag, queue_offset,
                      phys_offset, sys_flag & ~0x30, born_ts)
    out += ipv4_bytes(born_host[0]) + struct.pack(">i", born_host[1])
    out += struct.pack(">q", store_ts)
    out += ipv4_bytes(store_host[0]) + struct.pack(">i", store_host[1])
    out += struct.pack(">iqi", reconsume, 0, len(body)) + body
    out += struct.pack(">b", len(topic_b)) + topic_b
    out += struct.pack(">h", len(props_b)) + props_b
    assert len(out) == total, (len(out), total)
    return out


def parse_batch_body(body: bytes) -> list[dict]:
    """Split a SEND_BATCH_MESSAGE body into its short records (section 4.10)."""
    msgs = []
    pos = 0
    while pos < len(body):
        if pos + 20 > len(body):
            raise ProtocolError(f"truncated batch record at {pos}")
        total, magic, crc, flag, blen = struct.unpack_from(">iiiii", body, pos)
        b0 = pos + 20
        if blen < 0 or b0 + blen + 2 > len(body):
            raise ProtocolError(f"bad batch body length at {pos}")
        mbody = body[b0:b0 + blen]
        (plen,) = struct.unpack_from(">h", body, b0 + blen)
        p0 = b0 + blen + 2
        if plen < 0 or p0 + plen > len(body):
            raise ProtocolError(f"bad batch properties length at {pos}")
        props = body[p0:p0 + plen].decode("utf-8", "replace")
        if total != 20 + blen + 2 + plen:
            raise ProtocolError(f"batch record total {total} != {20 + blen + 2 + plen}")
        msgs.append({"total": total, "magic": magic, "crc": crc, "flag": flag,
                     "body": mbody, "properties": props})
        pos = p0 + plen
    return msgs


def parse_records(body: bytes) -> list[dict]:
    """Decode stored records (used only to describe pull bodies if a client ever sends one)."""
    out = []
    pos = 0
    while pos + 91 <= len(body):
        (total,) = struct.unpack_from(">i", body, pos)
        if total < 91 or pos + total > len(body):
            break
        out.append({"total": total})
        pos += total
    return out


class Store:
    """Tiny in-memory broker state shared by all connections."""

    def __init__(self, broker_port: int) -> None:
        self.lock = threading.Lock()
        self.broker_port = broker_port
        self.queues: dict[tuple[str, int], list[bytes]] = {}
        self.store_ts: dict[tuple[str, int], list[int]] = {}
        self.phys = 0
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.groups: dict[str, set[str]] = {}
        self.seeded: set[tuple[str, int]] = set()

    def offset_msg_id(self, phys: int) -> str:
        """Offset message id of 127.0.0.1:<broker port> + physical offset (section 4.8)."""
        return ("7F000001" + f"{self.broker_port:08X}" + f"{phys:016X}").upper()

    def append(self, *, topic: str, queue_id: int, flag: int, sys_flag: int, born_ts: int,
               born_host: tuple[str, int], reconsume: int, body: bytes, properties: str) -> tuple[str, int]:
        """Append one message; returns (offset msg id, queue offset)."""
        with self.lock:
            q = self.queues.setdefault((topic, queue_id), [])
            ts = self.store_ts.setdefault((topic, queue_id), [])
            now = int(time.time() * 1000)
            rec = encode_record(topic=topic, queue_id=queue_id, flag=flag, queue_offset=len(q),
                                phys_offset=self.phys, sys_flag=sys_flag, born_ts=born_ts,
                                born_host=born_host, store_ts=now,
                                store_host=("127.0.0.1", self.broker_port), reconsume=reconsume,
                                body=body, properties=properties)
            msg_id = self.offset_msg_id(self.phys)
            q.append(rec)
            ts.append(now)
            self.phys += len(rec)
            return msg_id, len(q) - 1

    def seed_if_empty(self, topic: str, queue_id: int) -> None:
        """Give an untouched queue one message so that the first pull is FOUND (not for %RETRY%)."""
        with self.lock:
            key = (topic, queue_id)
            if self.queues.get(key) or key in self.seeded:
                return
            self.seeded.add(key)
        props = format_properties([("TAGS", "TagA"), ("KEYS", "seed-1"),
                                   ("UNIQ_KEY", "7F00000100002A9F0000000000000000"),
                                   ("WAIT", "true"), ("CLUSTER", CLUSTER_NAME)])
        self.append(topic=topic, queue_id=queue_id, flag=0, sys_flag=0,
                    born_ts=int(time.time() * 1000), born_host=("127.0.0.1", 1),
                    reconsume=0, body=b"seeded by capture_server.py", properties=props)

    def read(self, topic: str, queue_id: int, offset: int, max_nums: int) -> tuple[list[bytes], int]:
        """Records from `offset` (at most `max_nums`) and the queue's max offset."""
        with self.lock:
            q = self.queues.get((topic, queue_id), [])
            if offset < 0:
                return [], len(q)
            return q[offset:offset + max(1, max_nums)], len(q)

    def max_offset(self, topic: str, queue_id: int) -> int:
        with self.lock:
            return len(self.queues.get((topic, queue_id), []))

    def earliest_ts(self, topic: str, queue_id: int) -> int:
        with self.lock:
            ts = self.store_ts.get((topic, queue_id), [])
            return ts[0] if ts else -1


# ---------------------------------------------------------------------------------------------
# Recording
# ---------------------------------------------------------------------------------------------

def to_hex_lines(frame: bytes) -> str:
    """Lower-case hex, HEX_BYTES_PER_LINE bytes per line, trailing newline."""
    lines = [frame[i:i + HEX_BYTES_PER_LINE].hex() for i in range(0, len(frame), HEX_BYTES_PER_LINE)]
    return "\n".join(lines) + "\n"


def describe_body(code: int, body: bytes) -> dict:
    """A human-oriented description of a request body."""
    if not body:
        return {"kind": "none"}
    if code == 320:
        try:
            msgs = parse_batch_body(body)
            return {"kind": "batch (section 4.10 short records)", "messages": [
                {"total": m["total"], "magic": m["magic"], "bodyCrc": m["crc"], "flag": m["flag"],
                 "bodyLength": len(m["body"]), "body": m["body"].decode("utf-8", "replace"),
                 "properties": parse_properties(m["properties"])} for m in msgs]}
        except ProtocolError as e:
            return {"kind": "batch, undecodable", "error": str(e)}
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return {"kind": "binary"}
    try:
        return {"kind": "json", "json": json.loads(text)}
    except ValueError:
        return {"kind": "text", "text": text}


class Recorder:
    """Writes received frames and the answer log."""

    def __init__(self, out_dir: str) -> None:
        self.out = out_dir
        os.makedirs(os.path.join(out_dir, "all"), exist_ok=True)
        self.lock = threading.Lock()
        self.seen: set[tuple[str, str]] = set()
        self.seq: dict[str, int] = {}
        self.all_seq: dict[str, int] = {}
        self.index: list[dict] = []
        self.log = open(os.path.join(out_dir, "answers.log"), "a", encoding="utf-8")

    def record(self, *, client: str, server: str, peer: tuple[str, int], frame: bytes, stype: int,
               header: dict, header_text: str, body: bytes, variant: str) -> str | None:
        """Store the frame; returns the selected fixture name when it is a first occurrence."""
        code = int(header.get("code", -1))
        label = code_name(code) + (f"-{variant}" if variant else "")
        with self.lock:
            n_all = self.all_seq.get(client, 0)
            self.all_seq[client] = n_all + 1
            if n_all < MAX_ALL_FRAMES_PER_CLIENT:
                path = os.path.join(self.out, "all", f"{client}-{n_all:04d}-{label}.hex")
                with open(path, "w", encoding="ascii") as f:
                    f.write(to_hex_lines(frame))
            key = (client, label)
            if key in self.seen:
                return None
            self.seen.add(key)
            nn = self.seq.get(client, 0) + 1
            self.seq[client] = nn
            name = f"{client}-{nn:02d}-{label}"
        with open(os.path.join(self.out, name + ".hex"), "w", encoding="ascii") as f:
            f.write(to_hex_lines(frame))
        meta = {
            "name": name,
            "client": client,
            "server": server,
            "peer": f"{peer[0]}:{peer[1]}",
            "received_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "frame_length": len(frame),
            "serialize_type": stype,
            "header_length": struct.unpack_from(">I", frame, 4)[0] & 0xFFFFFF,
            "header_text": header_text,
            "header": header,
            "body_length": len(body),
            "body": describe_body(code, body),
        }
        with open(os.path.join(self.out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2, ensure_ascii=False)
        with self.lock:
            self.index.append({"name": name, "code": code, "variant": variant, "client": client})
        return name

    def add_answer(self, name: str | None, answer: dict) -> None:
        """Attach the answer to the selected frame's .json sidecar."""
        if name is None:
            return
        path = os.path.join(self.out, name + ".json")
        with self.lock:
            with open(path, encoding="utf-8") as f:
                meta = json.load(f)
            meta["answer"] = answer
            with open(path, "w", encoding="utf-8") as f:
                json.dump(meta, f, indent=2, ensure_ascii=False)

    def write_log(self, line: str) -> None:
        with self.lock:
            self.log.write(line + "\n")
            self.log.flush()

    def close(self) -> None:
        with self.lock:
            with open(os.path.join(self.out, "index.json"), "w", encoding="utf-8") as f:
                json.dump(self.index, f, indent=2)
            self.log.close()


# ---------------------------------------------------------------------------------------------
# Request handling
# ---------------------------------------------------------------------------------------------

def route_body(broker_port: int) -> bytes:
    """TopicRouteData in standard JSON (section 3.3): one master, 4 queues, perm 6."""
    route = {
        "brokerDatas": [{
            "brokerAddrs": {"0": f"127.0.0.1:{broker_port}"},
            "brokerName": BROKER_NAME,
            "cluster": CLUSTER_NAME,
            "enableActingMaster": False,
        }],
        "filterServerTable": {},
        "queueDatas": [{
            "brokerName": BROKER_NAME,
            "perm": 6,
            "readQueueNums": 4,
            "topicSysFlag": 0,
            "writeQueueNums": 4,
        }],
    }
    return json.dumps(route, sort_keys=True, separators=(",", ":")).encode("utf-8")


def variant_of(code: int, header: dict, body: bytes, stype: int) -> str:
    """Distinguishes frames of one code that are worth separate fixtures."""
    ext = header.get("extFields") or {}
    parts = []
    if code == 105:
        topic = ext_str(ext, "topic", "") or ""
        if topic == "TBW102":
            parts.append("TBW102")
        elif topic.startswith("%RETRY%"):
            parts.append("retry")
    if code == 34:
        try:
            hb = json.loads(body.decode("utf-8"))
            consumers = hb.get("consumerDataSet") or []
            if not consumers:
                parts.append("producer")
            elif any(c.get("consumeType") == "CONSUME_PASSIVELY" for c in consumers):
                parts.append("push")
            elif any(c.get("subscriptionDataSet") for c in consumers):
                parts.append("pull-sub")
            else:
                parts.append("pull")
        except (ValueError, UnicodeDecodeError, AttributeError):
            parts.append("undecodable")
    if code in (11, 361) and ext_int(ext, "sysFlag") & PULL_SUSPEND:
        parts.append("suspend")
    flag = int(header.get("flag", 0))
    if flag & FLAG_ONEWAY:
        parts.append("oneway")
    if flag & FLAG_RESPONSE:
        parts.append("response")
    if stype == SERIALIZE_ROCKETMQ:
        parts.append("binary")
    return "-".join(parts)


class Connection:
    """One accepted client connection (either port)."""

    def __init__(self, app: "App", sock: socket.socket, peer: tuple[str, int], server: str) -> None:
        self.app = app
        self.sock = sock
        self.peer = peer
        self.server = server
        self.write_lock = threading.Lock()

    def send(self, frame: bytes) -> None:
        with self.write_lock:
            try:
                self.sock.sendall(frame)
            except OSError:
                pass

    def read_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def serve(self) -> None:
        while True:
            head = self.read_exact(4)
            if head is None:
                return
            (length,) = struct.unpack(">I", head)
            if length < 4 or length > MAX_FRAME_LEN:
                self.app.recorder.write_log(f"{self.server} {self.peer} bad length {length}; closing")
                return
            rest = self.read_exact(length)
            if rest is None:
                return
            self.app.handle(self, head + rest)


class App:
    """Dispatches decoded requests to the fake name server or broker."""

    def __init__(self, out_dir: str, namesrv_port: int, broker_port: int) -> None:
        self.recorder = Recorder(out_dir)
        self.store = Store(broker_port)
        self.namesrv_port = namesrv_port
        self.broker_port = broker_port

    def handle(self, conn: Connection, frame: bytes) -> None:
        try:
            stype, header, body, text = decode_frame(frame)
        except (ProtocolError, ValueError, UnicodeDecodeError, struct.error) as e:
            self.recorder.write_log(f"{conn.server} {conn.peer} undecodable frame ({e}): {frame[:64].hex()}")
            return
        code = int(header.get("code", -1))
        opaque = int(header.get("opaque", 0))
        flag = int(header.get("flag", 0))
        client = str(header.get("language", "unknown")).lower()
        variant = variant_of(code, header, body, stype)
        name = self.recorder.record(client=client, server=conn.server, peer=conn.peer, frame=frame,
                                    stype=stype, header=header, header_text=text, body=body,
                                    variant=variant)
        prefix = (f"{time.strftime('%H:%M:%S')} {conn.server:7s} {client:5s} {code_name(code)}({code}) "
                  f"opaque={opaque} flag={flag} stype={stype} len={len(frame)}"
                  + (f" -> saved {name}" if name else ""))
        if flag & FLAG_RESPONSE:
            self.recorder.write_log(prefix + " | a response from the client; not answered")
            return
        try:
            if conn.server == "namesrv":
                resp = self.namesrv(header, body)
            else:
                resp = self.broker(conn, header, body)
        except Exception as e:  # noqa: BLE001 - report any handler bug as SYSTEM_ERROR
            resp = (1, None, f"capture server error: {e!r}", b"", 0)
        rcode, ext, remark, rbody, delay_ms = resp
        answer = {"code": rcode, "extFields": ext or {}, "remark": remark, "body_length": len(rbody),
                  "delay_ms": delay_ms}
        if rbody and rcode == 0 and code not in (11, 361):
            try:
                answer["body"] = rbody.decode("utf-8")
            except UnicodeDecodeError:
                pass
        if flag & FLAG_ONEWAY:
            self.recorder.write_log(prefix + " | one-way: not answered")
            self.recorder.add_answer(name, {"one_way": True, "not_answered": True})
            return
        self.recorder.write_log(prefix + f" | answer code={rcode} remark={remark!r} ext={ext or {}} "
                                f"body={len(rbody)}B" + (f" after {delay_ms} ms" if delay_ms else ""))
        self.recorder.add_answer(name, answer)
        out = encode_response(opaque, rcode, ext, remark, rbody)
        if delay_ms:
            t = threading.Timer(delay_ms / 1000.0, conn.send, args=(out,))
            t.daemon = True
            t.start()
        else:
            conn.send(out)

    # -- name server ---------------------------------------------------------------------------

    def namesrv(self, header: dict, body: bytes):
        code = int(header.get("code", -1))
        if code == 105:
            return 0, None, None, route_body(self.broker_port), 0
        return 3, None, f" request type {code} not supported", b"", 0

    # -- broker --------------------------------------------------------------------------------

    def broker(self, conn: Connection, header: dict, body: bytes):
        code = int(header.get("code", -1))
        ext = header.get("extFields") or {}
        st = self.store
        if code == 34:
            return self.heartbeat(body)
        if code in (10, 310, 320):
            return self.send_message(conn, code, ext, body)
        if code in (11, 361):
            return self.pull(ext)
        if code == 14:
            key = (ext_str(ext, "consumerGroup", ""), ext_str(ext, "topic", ""), ext_int(ext, "queueId"))
            with st.lock:
                stored = st.offsets.get(key)
            if stored is not None:
                return 0, {"offset": stored}, None, b"", 0
            if ext_str(ext, "setZeroIfNotFound", "true").lower() == "false":
                return 22, None, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first", b"", 0
            return 0, {"offset": 0}, None, b"", 0
        if code == 15:
            key = (ext_str(ext, "consumerGroup", ""), ext_str(ext, "topic", ""), ext_int(ext, "queueId"))
            with st.lock:
                st.offsets[key] = ext_int(ext, "commitOffset")
            return 0, None, None, b"", 0
        if code == 30:
            return 0, {"offset": st.max_offset(ext_str(ext, "topic", ""), ext_int(ext, "queueId"))}, None, b"", 0
        if code == 31:
            return 0, {"offset": 0}, None, b"", 0
        if code == 32:
            return 0, {"timestamp": st.earliest_ts(ext_str(ext, "topic", ""), ext_int(ext, "queueId"))}, None, b"", 0
        if code == 29:
            return 0, {"offset": 0}, None, b"", 0
        if code == 38:
            group = ext_str(ext, "consumerGroup", "")
            with st.lock:
                ids = sorted(st.groups.get(group, set()))
            if not ids:
                return 1, None, f"no consumer for this group, {group}", b"", 0
            return 0, None, None, json.dumps({"consumerIdList": ids}, separators=(",", ":")).encode(), 0
        if code == 35:
            client_id = ext_str(ext, "clientID", "")
            group = ext_str(ext, "consumerGroup")
            if group:
                with st.lock:
                    st.groups.get(group, set()).discard(client_id)
            return 0, None, None, b"", 0
        if code == 36 or code == 42 or code == 46:
            return 0, None, None, b"", 0
        if code == 41:
            try:
                req = json.loads(body.decode("utf-8"))
                mqs = req.get("mqSet", [])
            except (ValueError, UnicodeDecodeError, AttributeError):
                mqs = []
            return 0, None, None, json.dumps({"lockOKMQSet": mqs}, separators=(",", ":")).encode(), 0
        return 3, None, f" request type {code} not supported", b"", 0

    def heartbeat(self, body: bytes):
        try:
            hb = json.loads(body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            hb = {}
        client_id = str(hb.get("clientID", ""))
        with self.store.lock:
            for cd in hb.get("consumerDataSet") or []:
                group = str(cd.get("groupName", ""))
                self.store.groups.setdefault(group, set()).add(client_id)
        return 0, {"IS_SUPPORT_HEART_BEAT_V2": "true", "IS_SUB_CHANGE": "true"}, None, b"", 0

    def send_message(self, conn: Connection, code: int, ext: dict, body: bytes):
        if code == 10:
            h = dict(ext)
        else:
            h = {V2_KEYS.get(k, k): v for k, v in ext.items()}
        topic = ext_str(h, "topic", "") or ""
        queue_id = ext_int(h, "queueId", 0)
        if queue_id < 0 or queue_id >= 4:
            queue_id = 0
        common = dict(topic=topic, queue_id=queue_id, sys_flag=ext_int(h, "sysFlag"),
                      born_ts=ext_int(h, "bornTimestamp", int(time.time() * 1000)),
                      born_host=conn.peer, reconsume=ext_int(h, "reconsumeTimes"))
        is_batch = code == 320 or (ext_str(h, "batch", "false") or "").lower() == "true"
        ids = []
        first_offset = None
        uniq = None
        if is_batch:
            for m in parse_batch_body(body):
                msg_id, qoff = self.store.append(flag=m["flag"], body=m["body"],
                                                 properties=m["properties"], **common)
                ids.append(msg_id)
                first_offset = qoff if first_offset is None else first_offset
        else:
            props = parse_properties(ext_str(h, "properties", "") or "")
            keys = {k for k, _ in props}
            uniq = dict(props).get("UNIQ_KEY")
            for k, v in (("CLUSTER", CLUSTER_NAME), ("MSG_REGION", REGION), ("TRACE_ON", "true")):
                if k not in keys:
                    props.append((k, v))
            msg_id, first_offset = self.store.append(flag=ext_int(h, "flag"), body=body,
                                                     properties=format_properties(props), **common)
            ids.append(msg_id)
        resp = {"msgId": ",".join(ids), "queueId": queue_id, "queueOffset": first_offset or 0,
                "MSG_REGION": REGION, "TRACE_ON": "true"}
        if uniq:
            resp["transactionId"] = uniq
        return 0, resp, None, b"", 0

    def pull(self, ext: dict):
        topic = ext_str(ext, "topic", "") or ""
        queue_id = ext_int(ext, "queueId")
        offset = ext_int(ext, "queueOffset")
        max_nums = ext_int(ext, "maxMsgNums", 32)
        sys_flag = ext_int(ext, "sysFlag")
        group = ext_str(ext, "consumerGroup", "") or ""
        if sys_flag & PULL_COMMIT_OFFSET:
            commit = ext_int(ext, "commitOffset", -1)
            if commit >= 0:
                with self.store.lock:
                    self.store.offsets[(group, topic, queue_id)] = commit
        if offset == 0 and not topic.startswith("%RETRY%"):
            self.store.seed_if_empty(topic, queue_id)
        records, max_offset = self.store.read(topic, queue_id, offset, max_nums)
        base = {"suggestWhichBrokerId": 0, "minOffset": 0, "maxOffset": max_offset,
                "topicSysFlag": 0, "groupSysFlag": 0}
        if records:
            base["nextBeginOffset"] = offset + len(records)
            return 0, base, "FOUND", b"".join(records), 0
        delay = 0
        if sys_flag & PULL_SUSPEND:
            delay = min(PULL_HOLD_MS, max(0, ext_int(ext, "suspendTimeoutMillis", PULL_HOLD_MS)))
        if offset > max_offset:
            base["nextBeginOffset"] = max_offset
            return 21, base, "OFFSET_OVERFLOW_BADLY", b"", 0
        base["nextBeginOffset"] = offset
        return 19, base, "OFFSET_OVERFLOW_ONE", b"", delay


# ---------------------------------------------------------------------------------------------
# Servers
# ---------------------------------------------------------------------------------------------

class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def make_server(app: App, port: int, role: str) -> _Server:
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:  # noqa: D401 - socketserver API
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            app.recorder.write_log(f"{time.strftime('%H:%M:%S')} {role:7s} connection from {self.client_address}")
            Connection(app, self.request, self.client_address, role).serve()
            app.recorder.write_log(f"{time.strftime('%H:%M:%S')} {role:7s} closed {self.client_address}")

    return _Server(("127.0.0.1", port), Handler)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namesrv-port", type=int, required=True)
    parser.add_argument("--broker-port", type=int, required=True)
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--max-seconds", type=float, default=900.0,
                        help="exit on its own after this long (default 900)")
    args = parser.parse_args()

    app = App(args.out, args.namesrv_port, args.broker_port)
    servers = [make_server(app, args.namesrv_port, "namesrv"), make_server(app, args.broker_port, "broker")]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"capture_server: namesrv 127.0.0.1:{args.namesrv_port} broker 127.0.0.1:{args.broker_port} "
          f"out {args.out}", flush=True)
    stop.wait(args.max_seconds)
    for s in servers:
        s.shutdown()
        s.server_close()
    app.recorder.close()
    print("capture_server: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
