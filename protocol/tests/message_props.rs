//! Property tests of `ringmq_protocol::message` through its public API: encode
//! then decode is the identity for records, batches and properties; arbitrary
//! and mutated bytes never panic the decoders. proptest prints the failing input
//! and persists its seed; `PROPTEST_CASES` raises the case count.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use proptest::prelude::*;
use ringmq_protocol::message::{
    self, BatchEntry, CrcCheck, MessageVersion, Properties, PropertiesBuilder, RecordSpec,
    decode_offset_msg_id, decode_record, encode_batch, iter_batch, iter_pull_body, offset_msg_id,
};

fn socket_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<u32>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ip), port))),
        (any::<u128>(), any::<u16>()).prop_map(|(ip, port)| {
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, 0))
        }),
    ]
}

/// Topics of 0..=300 bytes, so both versions are chosen automatically.
fn topic() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9_%-]{0,127}",
        "[A-Za-z0-9_%-]{128,300}",
        "\\PC{0,40}",
    ]
}

#[derive(Debug, Clone)]
struct Fields {
    topic: String,
    body: Vec<u8>,
    properties: Vec<u8>,
    numbers: (i32, i32, i64, i64, i32, i64, i64, i32, i64),
    hosts: (SocketAddr, SocketAddr),
    force_v2: bool,
}

fn fields() -> impl Strategy<Value = Fields> {
    (
        topic(),
        proptest::collection::vec(any::<u8>(), 0..300),
        proptest::collection::vec(any::<u8>(), 0..200),
        any::<(i32, i32, i64, i64, i32, i64, i64, i32, i64)>(),
        (socket_addr(), socket_addr()),
        any::<bool>(),
    )
        .prop_map(
            |(topic, body, properties, numbers, hosts, force_v2)| Fields {
                topic,
                body,
                properties,
                numbers,
                hosts,
                force_v2,
            },
        )
}

impl Fields {
    fn spec(&self) -> RecordSpec<'_> {
        let (
            queue_id,
            flag,
            queue_offset,
            commit_log_offset,
            sys_flag,
            born_ts,
            store_ts,
            reconsume,
            prepared,
        ) = self.numbers;
        RecordSpec {
            topic: &self.topic,
            body: &self.body,
            properties: &self.properties,
            queue_id,
            flag,
            queue_offset,
            commit_log_offset,
            sys_flag,
            born_timestamp_ms: born_ts,
            born_host: self.hosts.0,
            store_timestamp_ms: store_ts,
            store_host: self.hosts.1,
            reconsume_times: reconsume,
            prepared_transaction_offset: prepared,
            body_crc: None,
            version: self.force_v2.then_some(MessageVersion::V2),
        }
    }
}

proptest! {
    #[test]
    fn record_encode_then_decode_returns_the_fields(fields in fields()) {
        let spec = fields.spec();
        let mut out = vec![0x5A; 3];
        let len = spec.encode_append(&mut out).unwrap();
        prop_assert_eq!(len, spec.encoded_len());
        prop_assert_eq!(out.len(), 3 + len);
        let view = decode_record(&out[3..], CrcCheck::Verify).unwrap();
        let expected_version = if fields.force_v2 || fields.topic.len() > 127 {
            MessageVersion::V2
        } else {
            MessageVersion::V1
        };
        let expected = RecordSpec {
            sys_flag: spec.resolved_sys_flag(),
            body_crc: Some(message::body_crc(&fields.body)),
            version: Some(expected_version),
            ..spec
        };
        prop_assert_eq!(view.to_spec(), expected);
        prop_assert_eq!(view.born_host().is_ipv6(), fields.hosts.0.is_ipv6());
        prop_assert_eq!(view.store_host().is_ipv6(), fields.hosts.1.is_ipv6());
        // Encoding the decoded fields reproduces the bytes.
        let mut again = Vec::new();
        view.to_spec().encode_append(&mut again).unwrap();
        prop_assert_eq!(&again[..], &out[3..]);
    }

    #[test]
    fn pull_body_of_records_iterates_back_to_the_records(all in proptest::collection::vec(fields(), 0..6)) {
        let records: Vec<Vec<u8>> = all
            .iter()
            .map(|f| {
                let mut out = Vec::new();
                f.spec().encode_append(&mut out).unwrap();
                out
            })
            .collect();
        let mut body = Vec::new();
        message::encode_pull_body(records.iter().map(Vec::as_slice), &mut body).unwrap();
        let views: Vec<_> = iter_pull_body(&body, CrcCheck::Verify).collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(views.len(), records.len());
        for (view, record) in views.iter().zip(&records) {
            prop_assert_eq!(view.as_bytes(), &record[..]);
        }
    }

    #[test]
    fn batch_encode_then_iterate_returns_the_entries(
        raw in proptest::collection::vec(
            (any::<i32>(), proptest::collection::vec(any::<u8>(), 1..100),
             proptest::collection::vec(any::<u8>(), 0..100), any::<i32>(), any::<i32>()),
            0..8)
    ) {
        let entries: Vec<BatchEntry<'_>> = raw
            .iter()
            .map(|(flag, body, properties, magic_code, body_crc)| BatchEntry {
                flag: *flag,
                body,
                properties,
                magic_code: *magic_code,
                body_crc: *body_crc,
            })
            .collect();
        let mut body = Vec::new();
        let len = encode_batch(&entries, &mut body).unwrap();
        prop_assert_eq!(len, body.len());
        let decoded: Vec<_> = iter_batch(&body).collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(decoded, entries);
    }

    #[test]
    fn properties_build_then_parse_returns_the_pairs(
        pairs in proptest::collection::btree_map("[^\\x01\\x02]{1,20}", "[^\\x02]{1,40}", 0..10)
    ) {
        let mut out = Vec::new();
        let mut builder = PropertiesBuilder::new(&mut out);
        for (key, value) in &pairs {
            builder.push(key, value).unwrap();
        }
        let parsed: BTreeMap<String, String> = Properties::new(&out)
            .iter()
            .map(|(k, v)| (String::from_utf8(k.to_vec()).unwrap(), String::from_utf8(v.to_vec()).unwrap()))
            .collect();
        prop_assert_eq!(&parsed, &pairs);
        for (key, value) in &pairs {
            prop_assert_eq!(Properties::new(&out).get(key), Some(value.as_str()));
        }
    }

    #[test]
    fn offset_msg_id_encode_then_decode_returns_host_and_offset(host in socket_addr(), offset in any::<i64>()) {
        let id = offset_msg_id(&host, offset);
        prop_assert_eq!(id.len(), if host.is_ipv6() { 56 } else { 32 });
        prop_assert!(id.bytes().all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b)));
        prop_assert_eq!(decode_offset_msg_id(&id.to_lowercase()), Ok((host, offset)));
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoders(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        message::fuzz::record(&data);
        message::fuzz::batch(&data);
        let _ = iter_batch(&data).count();
        let _ = decode_offset_msg_id(&String::from_utf8_lossy(&data));
        let _ = Properties::new(&data).iter().count();
    }

    #[test]
    fn arbitrary_hex_of_id_lengths_never_panics(id in "[0-9A-Fa-f]{32}|[0-9A-Fa-f]{56}|[0-9A-Za-z]{0,60}") {
        let _ = decode_offset_msg_id(&id);
    }

    #[test]
    fn mutated_records_never_panic_and_keep_the_codec_properties(
        fields in fields(), flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>()
    ) {
        let mut out = Vec::new();
        fields.spec().encode_append(&mut out).unwrap();
        for (index, byte) in &flips {
            let at = index.index(out.len());
            out[at] = *byte;
        }
        message::fuzz::record(&out);
        message::fuzz::record(&out[..cut.index(out.len() + 1)]);
    }

    #[test]
    fn mutated_batches_never_panic_and_keep_the_codec_properties(
        bodies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..40), 1..4),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let entries: Vec<_> = bodies.iter().map(|b| BatchEntry::new(0, b, b"K\x01V\x02")).collect();
        let mut out = Vec::new();
        encode_batch(&entries, &mut out).unwrap();
        message::fuzz::batch(&out);
        for (index, byte) in &flips {
            let at = index.index(out.len());
            out[at] = *byte;
        }
        message::fuzz::batch(&out);
    }
}

/// Seed corpus replayed through the fuzz entry points: the shapes a fuzzer
/// should start from (valid V1, V2 and IPv6 records, a blank, batches), plus
/// known edge cases.
#[test]
fn fuzz_seed_corpus_replays_without_panic() {
    let v6: SocketAddr = "[::1]:10911".parse().unwrap();
    let long_topic = "x".repeat(130);
    let specs = [
        RecordSpec {
            topic: "TopicTest",
            body: b"hello",
            properties: b"TAGS\x01A\x02",
            ..RecordSpec::default()
        },
        RecordSpec {
            topic: &long_topic,
            body: b"b",
            ..RecordSpec::default()
        },
        RecordSpec {
            topic: "T",
            born_host: v6,
            store_host: v6,
            ..RecordSpec::default()
        },
    ];
    let mut corpus: Vec<Vec<u8>> = Vec::new();
    for spec in &specs {
        let mut out = Vec::new();
        spec.encode_append(&mut out).unwrap();
        corpus.push(out);
    }
    let mut blank = [0u8; 8];
    message::encode_blank(&mut blank, 1 << 20).unwrap();
    corpus.push(blank.to_vec());
    corpus.push(corpus.concat());
    corpus.push(Vec::new());
    corpus.push(vec![0xFF; 100]);
    for input in &corpus {
        message::fuzz::record(input);
        message::fuzz::batch(input);
    }
    let mut batch = Vec::new();
    encode_batch(
        &[
            BatchEntry::new(1, b"a", b""),
            BatchEntry::new(2, b"bc", b"k\x01v"),
        ],
        &mut batch,
    )
    .unwrap();
    message::fuzz::batch(&batch);
    message::fuzz::record(&batch);
    assert_eq!(iter_batch(&batch).count(), 2);
    // The reference offset msg id (2.3.2 / 4.8) decodes.
    let host = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 168, 0, 10)), 10911);
    assert_eq!(
        decode_offset_msg_id("C0A8000A00002A9F0000000000000400"),
        Ok((host, 1024))
    );
}
