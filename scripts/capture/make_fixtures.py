#!/usr/bin/env python3
"""Copy the frames selected by capture_server.py into protocol/tests/fixtures/ with .note sidecars.

Usage:
    make_fixtures.py --frames DIR --fixtures DIR --command TEXT
                     [--java-desc TEXT] [--rust-desc TEXT]

The server names its first-occurrence frames `<client>-<nn>-<CODE_NAME>[-variant]`, where `nn`
depends on timing. Fixtures get stable names instead: `<client>-<code>-<CODE_NAME>[-variant]`
(e.g. `java-310-SEND_MESSAGE_V2.hex`), so tests can refer to them across regenerations.
For every expected action a client could not produce, a `.note` without `.hex` explains why.
Python 3.11, standard library only.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys

#: What the scenario did to make each client send each frame (client, label) -> description.
API_CALLS = {
    ("java", "GET_ROUTEINFO_BY_TOPIC"):
        "DefaultMQProducer.send(Message): the first send looks up the route of CaptureTopic "
        "(MQClientInstance.updateTopicRouteInfoFromNameServer)",
    ("java", "GET_ROUTEINFO_BY_TOPIC-retry"):
        "DefaultMQPushConsumer.start(): route of the group's %RETRY% topic",
    ("java", "HEART_BEAT-producer"):
        "heartbeat of the producer's client instance (sent right after the first route update "
        "of DefaultMQProducer.send, no consumers registered)",
    ("java", "HEART_BEAT-pull"):
        "heartbeat of DefaultMQPullConsumer's client instance (consumer without subscriptions, "
        "CONSUME_ACTIVELY)",
    ("java", "HEART_BEAT-push"):
        "heartbeat of DefaultMQPushConsumer's client instance (subscription 'TagA || TagB' plus "
        "the %RETRY% subscription)",
    ("java", "SEND_MESSAGE_V2"):
        "DefaultMQProducer.send(Message) synchronous; topic CaptureTopic, tags TagA, keys order-1, "
        "body 'hello from the java client'",
    ("java", "SEND_BATCH_MESSAGE"):
        "DefaultMQProducer.send(Collection<Message>) with 3 messages: tags TagB, keys batch-0..2, "
        "bodies 'batch message 0..2'",
    ("java", "UNREGISTER_CLIENT"):
        "DefaultMQProducer.shutdown() -> MQClientInstance.unregisterClient (producer group)",
    ("java", "GET_MAX_OFFSET"): "DefaultMQPullConsumer.maxOffset(mq)",
    ("java", "GET_MIN_OFFSET"): "DefaultLitePullConsumer.seek(mq, 0) (checks the queue's min offset)",
    ("java", "QUERY_CONSUMER_OFFSET"): "DefaultMQPullConsumer.fetchConsumeOffset(mq, true)",
    ("java", "PULL_MESSAGE"): "DefaultMQPullConsumer.pull(mq, \"*\", 0, 32, 5000)",
    ("java", "PULL_MESSAGE-suspend"):
        "DefaultMQPushConsumer long-polling pull (PullMessageService after rebalance)",
    ("java", "LITE_PULL_MESSAGE-suspend"):
        "DefaultLitePullConsumer.poll() after assign([mq]) + seek(mq, 0)",
    ("java", "UPDATE_CONSUMER_OFFSET"):
        "RemoteBrokerOffsetStore.updateConsumeOffsetToBroker(mq, offset, false) (synchronous), "
        "from DefaultMQPullConsumer.getOffsetStore()",
    ("java", "UPDATE_CONSUMER_OFFSET-oneway"):
        "DefaultMQPullConsumer.getOffsetStore().persist(mq) (one-way)",
    ("java", "GET_CONSUMER_LIST_BY_GROUP"): "DefaultMQPushConsumer rebalance after start()",
    ("rust", "GET_ROUTEINFO_BY_TOPIC"):
        "DefaultMQProducer::send_with_timeout: the first send looks up the route of CaptureTopic",
    ("rust", "GET_ROUTEINFO_BY_TOPIC-retry"):
        "DefaultMQPushConsumer::start: route of the group's %RETRY% topic",
    ("rust", "HEART_BEAT-producer"):
        "heartbeat of the producer's client instance right after its first send",
    ("rust", "HEART_BEAT-pull"):
        "heartbeat of DefaultMQPullConsumer's client instance (no subscriptions yet, "
        "CONSUME_ACTIVELY)",
    ("rust", "HEART_BEAT-pull-sub"):
        "heartbeat of DefaultMQPullConsumer's client instance after it touched CaptureTopic (the "
        "Rust classic pull consumer registers a '*' subscription for it, CONSUME_ACTIVELY)",
    ("rust", "HEART_BEAT-push"):
        "heartbeat of DefaultMQPushConsumer's client instance (subscription '*' plus the %RETRY% "
        "subscription, CONSUME_PASSIVELY)",
    ("java", "HEART_BEAT-pull-sub"):
        "heartbeat of a pull/lite-pull consumer client instance with subscriptions",
    ("rust", "SEND_MESSAGE"):
        "DefaultMQProducer::send_with_timeout(message, 5000) synchronous; topic CaptureTopic, "
        "tags TagA, key order-1, body 'hello from the rust client'",
    ("rust", "SEND_BATCH_MESSAGE"):
        "DefaultMQProducer::send_batch(vec of 3): tags TagB, keys batch-0..2, bodies "
        "'batch message 0..2'",
    ("rust", "UNREGISTER_CLIENT"): "DefaultMQProducer::shutdown (producer group)",
    ("rust", "GET_MAX_OFFSET"): "DefaultMQPullConsumer::max_offset(mq)",
    ("rust", "GET_MIN_OFFSET"): "DefaultLitePullConsumer::seek(mq, 0) (checks the queue's min offset)",
    ("rust", "QUERY_CONSUMER_OFFSET"):
        "DefaultMQPullConsumer::fetch_consume_offset(mq, true) (or its rebalance, which sends the "
        "same request at the same moment)",
    ("rust", "GET_CONSUMER_LIST_BY_GROUP"):
        "rebalance of DefaultMQPullConsumer (the Rust classic pull consumer is built on the lite "
        "pull consumer and rebalances the topics it touched)",
    ("rust", "PULL_MESSAGE"): "DefaultMQPullConsumer::pull(mq, \"*\", 0, 32)",
    ("rust", "PULL_MESSAGE-suspend"): "DefaultMQPushConsumer long-polling pull",
    ("rust", "LITE_PULL_MESSAGE-suspend"):
        "background pull of the lite pull consumer inside DefaultMQPullConsumer (group "
        "CapturePullGroup, started by its rebalance; DefaultLitePullConsumer::poll_with_timeout "
        "sends the same shape)",
    ("rust", "UPDATE_CONSUMER_OFFSET-oneway"):
        "DefaultLitePullConsumer::commit_sync_with_map({mq: offset}, persist = true) (one-way)",
    ("rust", "UPDATE_CONSUMER_OFFSET"):
        "DefaultLitePullConsumer::offset_store() -> OffsetStore::update_consume_offset_to_broker("
        "mq, offset, false) (synchronous)",
}

#: Actions every client is expected to produce: (action, labels that satisfy it).
EXPECTED = [
    ("route query", ["GET_ROUTEINFO_BY_TOPIC"]),
    ("heartbeat", ["HEART_BEAT-producer", "HEART_BEAT-pull", "HEART_BEAT-pull-sub", "HEART_BEAT-push"]),
    ("send v2", ["SEND_MESSAGE_V2"]),
    ("batch send", ["SEND_BATCH_MESSAGE"]),
    ("pull", ["PULL_MESSAGE", "PULL_MESSAGE-suspend", "LITE_PULL_MESSAGE-suspend"]),
    ("consumer offset update", ["UPDATE_CONSUMER_OFFSET", "UPDATE_CONSUMER_OFFSET-oneway"]),
    ("consumer offset query", ["QUERY_CONSUMER_OFFSET"]),
]

#: Known reasons for an expected action that is absent, keyed by (client, action).
MISSING_REASONS = {
    ("rust", "send v2"):
        "rocketmq-client-rust 1.0.0 does not send SEND_MESSAGE_V2 (310) for a normal send: "
        "DefaultMQProducer::send_with_timeout sent SEND_MESSAGE (10) with the long header names "
        "(see rust-10-SEND_MESSAGE.hex). Its batches do use 320 with the V2 one-letter keys.",
}

SERIALIZE = {0: "JSON", 1: "ROCKETMQ (binary)"}


def fixture_label(meta: dict) -> tuple[str, int, str]:
    """(client, code, label) of a selected frame, from its server-side name."""
    client = meta["client"]
    code = int(meta["header"].get("code", -1))
    # Server name: <client>-<nn>-<label>; the label may itself contain dashes.
    label = meta["name"].split("-", 2)[2]
    return client, code, label


def api_call(client: str, label: str) -> str:
    """The scenario step behind a frame; `-binary` frames come from the same steps."""
    binary = label.endswith("-binary")
    base = label[: -len("-binary")] if binary else label
    text = API_CALLS.get((client, base), "(not attributed; see answers.log of the capture)")
    if binary:
        text += ("; run with -Drocketmq.serialize.type=ROCKETMQ, so the header is the ROCKETMQ "
                 "binary form (remoting-protocol.md 1.5)")
    return text


def header_intro(meta: dict) -> str:
    if meta["serialize_type"] == 1:
        return ("header decoded from the ROCKETMQ binary form, shown as JSON (fields in binary layout "
                "order, extFields entries in wire order; \\u0001/\\u0002 are the property separators):")
    return "header JSON exactly as sent (member order preserved; \\u0001/\\u0002 are the property separators):"


def describe_body(meta: dict) -> str:
    body = meta["body"]
    kind = body.get("kind")
    n = meta["body_length"]
    if kind == "none":
        return "none (body length 0)"
    if kind == "json":
        pretty = json.dumps(body["json"], indent=2, ensure_ascii=False)
        return f"{n} bytes, JSON:\n{pretty}"
    if kind == "text":
        return f"{n} bytes, the message body (UTF-8 text): {body['text']!r}"
    if kind and kind.startswith("batch ("):
        lines = [f"{n} bytes, batch body: {len(body['messages'])} short records (remoting-protocol.md 4.10):"]
        for i, m in enumerate(body["messages"]):
            props = ", ".join(f"{k}={v}" for k, v in m["properties"])
            lines.append(f"  [{i}] totalSize={m['total']} magic={m['magic']} bodyCrc={m['bodyCrc']} "
                         f"flag={m['flag']} bodyLength={m['bodyLength']} body={m['body']!r}")
            lines.append(f"      properties ({len(props)} chars decoded): {props}")
        return "\n".join(lines)
    return f"{n} bytes, {kind}"


def describe_answer(answer: dict | None) -> str:
    if not answer:
        return "(no answer recorded)"
    if answer.get("one_way"):
        return "nothing (one-way request)"
    text = f"code {answer['code']}"
    if answer.get("remark"):
        text += f", remark {answer['remark']!r}"
    if answer.get("extFields"):
        text += f", extFields {json.dumps(answer['extFields'], sort_keys=True)}"
    text += f", body {answer['body_length']} bytes"
    if answer.get("body"):
        text += f": {answer['body']}"
    if answer.get("delay_ms"):
        text += f" (held {answer['delay_ms']} ms)"
    return text


def write_note(path: str, lines: list[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines).rstrip("\n") + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", required=True)
    parser.add_argument("--fixtures", required=True)
    parser.add_argument("--command", required=True, help="capture command to record in notes")
    parser.add_argument("--java-desc", default="org.apache.rocketmq:rocketmq-client:5.3.3 (Maven Central)")
    parser.add_argument("--rust-desc", default="rocketmq-client-rust 1.0.0 (crates.io)")
    args = parser.parse_args()

    descs = {"java": args.java_desc, "rust": args.rust_desc}
    metas = []
    for path in sorted(glob.glob(os.path.join(args.frames, "*.json"))):
        if os.path.basename(path) == "index.json":
            continue
        with open(path, encoding="utf-8") as f:
            metas.append(json.load(f))
    clients = sorted({m["client"] for m in metas})
    if not metas:
        print("make_fixtures: no frames captured", file=sys.stderr)
        return 1
    os.makedirs(args.fixtures, exist_ok=True)
    # Replace the previous fixtures of the clients captured this time (never other files).
    for client in clients:
        for old in glob.glob(os.path.join(args.fixtures, f"{client}-*")):
            if old.endswith((".hex", ".note")):
                os.remove(old)

    labels_by_client: dict[str, set[str]] = {c: set() for c in clients}
    written = []
    for meta in metas:
        client, code, label = fixture_label(meta)
        labels_by_client[client].add(label)
        name = f"{client}-{code}-{label}"
        shutil.copyfile(os.path.join(args.frames, meta["name"] + ".hex"),
                        os.path.join(args.fixtures, name + ".hex"))
        h = meta["header"]
        flag = int(h.get("flag", 0))
        kinds = []
        kinds.append("response" if flag & 1 else "request")
        if flag & 2:
            kinds.append("one-way")
        try:
            pretty = json.dumps(json.loads(meta["header_text"]), indent=2, ensure_ascii=False)
        except ValueError:
            pretty = meta["header_text"]
        lines = [
            f"fixture: {name}.hex",
            f"client: {descs.get(client, client)}",
            f"API call: {api_call(client, label)}",
            f"captured: {meta['received_at']} on {meta['server']} (fake {'name server' if meta['server'] == 'namesrv' else 'broker'} "
            f"scripts/capture/capture_server.py); first frame of this code/variant from this client",
            f"capture command: {args.command}",
            f"frame: {meta['frame_length']} bytes incl. the 4-byte length word (length field = "
            f"{meta['frame_length'] - 4}); serialize type {meta['serialize_type']} "
            f"({SERIALIZE.get(meta['serialize_type'], '?')}); header {meta['header_length']} bytes; "
            f"body {meta['body_length']} bytes",
            f"command: code {h.get('code')} ({label.split('-')[0]}), flag {flag} ({', '.join(kinds)}), "
            f"opaque {h.get('opaque')}, language {h.get('language')}, version {h.get('version')}",
            header_intro(meta),
            f"  {meta['header_text']}",
            "header JSON, pretty:",
            pretty,
            f"body: {describe_body(meta)}",
            f"capture server answered: {describe_answer(meta.get('answer'))}",
        ]
        write_note(os.path.join(args.fixtures, name + ".note"), lines)
        written.append(name)

    for client in clients:
        for action, labels in EXPECTED:
            if labels_by_client[client] & set(labels):
                continue
            reason = MISSING_REASONS.get((client, action),
                                         "the client did not send it during the capture scenario "
                                         "(see the capture logs for the step that failed)")
            slug = action.replace(" ", "_").upper()
            name = f"{client}-MISSING-{slug}"
            write_note(os.path.join(args.fixtures, name + ".note"), [
                f"missing fixture: {action}",
                f"client: {descs.get(client, client)}",
                f"capture command: {args.command}",
                f"why: {reason}",
            ])
            written.append(name + " (note only)")
    for n in written:
        print(f"make_fixtures: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
