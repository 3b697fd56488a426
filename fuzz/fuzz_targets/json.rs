//! Fuzz target `json`: the body is `ringmq_protocol::json::fuzz_json`, which
//! protocol/tests/fuzz_corpus.rs also replays over the seed corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ringmq_protocol::json::fuzz_json(data));
