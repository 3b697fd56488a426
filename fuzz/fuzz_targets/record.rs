//! Fuzz target `record`: the body is `ringmq_protocol::message::fuzz::record`, which
//! protocol/tests/fuzz_corpus.rs also replays over the seed corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ringmq_protocol::message::fuzz::record(data));
