//! Replays the checked-in seed corpus of every cargo-fuzz target
//! (`fuzz/corpus/<target>/`) through the same functions the targets call, so
//! that `cargo test` on stable covers them. New crashes found by fuzzing are
//! added to the corpus and stay here as regression inputs.

use std::path::Path;

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 5] = [
    ("frame", ringmq_protocol::frame::fuzz_frame),
    ("header", ringmq_protocol::command::fuzz_header),
    ("record", ringmq_protocol::message::fuzz::record),
    ("batch", ringmq_protocol::message::fuzz::batch),
    ("json", ringmq_protocol::json::fuzz_json),
];

#[test]
fn every_fuzz_target_survives_its_seed_corpus() {
    let corpus_root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    for (target, run) in TARGETS {
        let dir = corpus_root.join(target);
        let mut inputs = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("corpus entry").path();
            let data = std::fs::read(&path).expect("corpus file");
            let outcome = std::panic::catch_unwind(|| run(&data));
            assert!(
                outcome.is_ok(),
                "fuzz target {target} failed on {}",
                path.display()
            );
            inputs += 1;
        }
        assert!(inputs > 0, "fuzz target {target} has an empty seed corpus");
    }
}
