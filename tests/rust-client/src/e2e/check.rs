//! What a scenario sent, what its consumers saw, and the pure comparisons between the two.
//!
//! Nothing here talks to a broker: the scenarios record [`Sent`] values as they build messages
//! and [`Delivery`] values as listeners receive them, then call these functions, which the unit
//! tests at the end of the file exercise directly.
//!
//! # Invariants
//!
//! * A message is identified by its first key ([`Sent::id`]); a scenario never sends two
//!   messages with the same first key ([`index_sent`] rejects that).
//! * A comparison reports every problem it finds (up to [`PROBLEMS_SHOWN_MAX`] of them in the
//!   error text), never just the first, so one failing run explains itself.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// How many individual problems an error message lists before summarising the rest.
pub const PROBLEMS_SHOWN_MAX: usize = 12;

/// The user property every test message carries: its index within the scenario.
pub const INDEX_PROPERTY: &str = "E2E_INDEX";

/// One message as the producer built it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// All keys, in order; the first one is unique within the scenario.
    pub keys: Vec<String>,
    /// The tag, if the message has one.
    pub tags: Option<String>,
    /// The exact body bytes.
    pub body: Vec<u8>,
    /// The value of [`INDEX_PROPERTY`].
    pub index: u32,
}

impl Sent {
    /// The unique identity of the message: its first key.
    pub fn id(&self) -> &str {
        self.keys.first().map_or("", String::as_str)
    }
}

/// One delivery of a message to a listener, with what the client decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Which consumer (instance name) received it.
    pub consumer: String,
    /// The topic the client presents (retry deliveries are reset to the original topic).
    pub topic: String,
    /// The topic of the queue the message was pulled from (`%RETRY%group` for retries).
    pub queue_topic: String,
    /// Queue id the message was pulled from.
    pub queue_id: i32,
    /// Offset of the message in that queue.
    pub queue_offset: i64,
    /// Keys as decoded from the KEYS property (empty when absent).
    pub keys: Vec<String>,
    /// The tag, if any.
    pub tags: Option<String>,
    /// The body bytes after any decompression.
    pub body: Vec<u8>,
    /// The value of [`INDEX_PROPERTY`], if present.
    pub index: Option<String>,
    /// The client-generated unique id (UNIQ_KEY property), if present.
    pub uniq_key: Option<String>,
    /// The broker's message id for this stored copy.
    pub msg_id: String,
    /// The RETRY_TOPIC property (set by the broker on messages sent back for retry).
    pub retry_topic: Option<String>,
    /// How many times the broker says this message was consumed before.
    pub reconsume_times: i32,
}

impl Delivery {
    /// The identity this delivery claims: its first key.
    pub fn id(&self) -> &str {
        self.keys.first().map_or("", String::as_str)
    }
}

/// Indexes the sent messages by identity; an error if two share one.
pub fn index_sent(sent: &[Sent]) -> Result<BTreeMap<&str, &Sent>, String> {
    let mut by_id = BTreeMap::new();
    for message in sent {
        if by_id.insert(message.id(), message).is_some() {
            return Err(format!(
                "test bug: two sent messages share the key {:?}",
                message.id()
            ));
        }
    }
    Ok(by_id)
}

/// The problems in one delivery's content compared with what was sent (empty when it matches).
pub fn content_problems(expected: &Sent, topic: &str, got: &Delivery) -> Vec<String> {
    let id = expected.id();
    let mut problems = Vec::new();
    if got.topic != topic {
        problems.push(format!("{id}: topic {:?}, expected {topic:?}", got.topic));
    }
    if got.keys != expected.keys {
        problems.push(format!(
            "{id}: keys {:?}, expected {:?}",
            got.keys, expected.keys
        ));
    }
    if got.tags != expected.tags {
        problems.push(format!(
            "{id}: tags {:?}, expected {:?}",
            got.tags, expected.tags
        ));
    }
    if got.body != expected.body {
        problems.push(format!(
            "{id}: body of {} bytes {}, expected {} bytes {}",
            got.body.len(),
            preview(&got.body),
            expected.body.len(),
            preview(&expected.body)
        ));
    }
    let index = expected.index.to_string();
    if got.index.as_deref() != Some(index.as_str()) {
        problems.push(format!(
            "{id}: property {INDEX_PROPERTY} {:?}, expected {index:?}",
            got.index
        ));
    }
    problems
}

/// Checks that `deliveries` hold every sent message exactly once, with exact content, and
/// nothing else.
pub fn check_exactly_once(
    sent: &[Sent],
    topic: &str,
    deliveries: &[Delivery],
) -> Result<(), String> {
    check_deliveries(sent, topic, deliveries, 1)
}

/// Checks that `deliveries` hold every sent message exactly `times` times, with exact content,
/// and nothing else.
pub fn check_deliveries(
    sent: &[Sent],
    topic: &str,
    deliveries: &[Delivery],
    times: usize,
) -> Result<(), String> {
    let by_id = index_sent(sent)?;
    let mut problems = Vec::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for got in deliveries {
        match by_id.get(got.id()) {
            Some(expected) => {
                *counts.entry(got.id()).or_default() += 1;
                problems.extend(content_problems(expected, topic, got));
            }
            None => problems.push(format!(
                "unexpected message keys={:?} tags={:?} body={} (queue {} offset {})",
                got.keys,
                got.tags,
                preview(&got.body),
                got.queue_id,
                got.queue_offset
            )),
        }
    }
    for id in by_id.keys() {
        let count = counts.get(id).copied().unwrap_or(0);
        if count != times {
            problems.push(format!("{id}: delivered {count} time(s), expected {times}"));
        }
    }
    finish(
        &format!(
            "{} deliveries of {} sent messages (each expected {times} time(s))",
            deliveries.len(),
            sent.len()
        ),
        problems,
    )
}

/// The identities of `sent` not yet present in `deliveries`.
pub fn missing_ids<'a>(sent: &'a [Sent], deliveries: &[Delivery]) -> BTreeSet<&'a str> {
    let seen: BTreeSet<&str> = deliveries.iter().map(Delivery::id).collect();
    sent.iter()
        .map(Sent::id)
        .filter(|id| !seen.contains(id))
        .collect()
}

/// Checks per-key order: for every order key, the deliveries carrying it have strictly
/// increasing `step`s in delivery order, equal to the order in which they were sent.
///
/// `order_of` maps a sent message identity to `(order key, step)`.
pub fn check_per_key_order(
    deliveries: &[Delivery],
    order_of: &BTreeMap<String, (String, u32)>,
) -> Result<(), String> {
    let mut seen: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    let mut expected: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for (order, step) in order_of.values() {
        expected.entry(order.as_str()).or_default().push(*step);
    }
    for steps in expected.values_mut() {
        steps.sort_unstable();
    }
    let mut problems = Vec::new();
    for got in deliveries {
        match order_of.get(got.id()) {
            Some((order, step)) => seen.entry(order.as_str()).or_default().push(*step),
            None => problems.push(format!(
                "unexpected message {:?} in an ordered stream",
                got.id()
            )),
        }
    }
    for (order, steps) in &expected {
        let got = seen.get(order).cloned().unwrap_or_default();
        if &got != steps {
            problems.push(format!(
                "order {order}: steps delivered as {got:?}, expected {steps:?}"
            ));
        }
    }
    finish(
        &format!("per-key order over {} deliveries", deliveries.len()),
        problems,
    )
}

/// Turns a list of problems into `Ok` (empty) or one readable error.
pub fn finish(what: &str, problems: Vec<String>) -> Result<(), String> {
    if problems.is_empty() {
        return Ok(());
    }
    let mut text = format!("{what}: {} problem(s):", problems.len());
    for problem in problems.iter().take(PROBLEMS_SHOWN_MAX) {
        let _ = write!(text, "\n    - {problem}");
    }
    if problems.len() > PROBLEMS_SHOWN_MAX {
        let _ = write!(
            text,
            "\n    ... and {} more",
            problems.len() - PROBLEMS_SHOWN_MAX
        );
    }
    Err(text)
}

/// A short printable rendering of a body for error messages.
pub fn preview(body: &[u8]) -> String {
    const PREVIEW_BYTES_MAX: usize = 48;
    let shown = &body[..body.len().min(PREVIEW_BYTES_MAX)];
    let text = String::from_utf8_lossy(shown);
    if body.len() > PREVIEW_BYTES_MAX {
        format!("{text:?}...")
    } else {
        format!("{text:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(id: &str, index: u32) -> Sent {
        Sent {
            keys: vec![id.to_string(), "shared".to_string()],
            tags: Some("TagA".to_string()),
            body: format!("body of {id}").into_bytes(),
            index,
        }
    }

    fn delivered(message: &Sent) -> Delivery {
        Delivery {
            consumer: "c1".to_string(),
            topic: "T".to_string(),
            queue_topic: "T".to_string(),
            queue_id: 0,
            queue_offset: i64::from(message.index),
            keys: message.keys.clone(),
            tags: message.tags.clone(),
            body: message.body.clone(),
            index: Some(message.index.to_string()),
            uniq_key: None,
            msg_id: String::new(),
            retry_topic: None,
            reconsume_times: 0,
        }
    }

    #[test]
    fn exact_deliveries_pass() {
        let sent = vec![sent("a", 0), sent("b", 1)];
        let got: Vec<Delivery> = sent.iter().map(delivered).collect();
        assert_eq!(check_exactly_once(&sent, "T", &got), Ok(()));
    }

    #[test]
    fn a_missing_message_is_reported() {
        let sent = vec![sent("a", 0), sent("b", 1)];
        let got = vec![delivered(&sent[0])];
        let error = check_exactly_once(&sent, "T", &got).unwrap_err();
        assert!(
            error.contains("b: delivered 0 time(s), expected 1"),
            "{error}"
        );
    }

    #[test]
    fn a_duplicate_is_reported_when_once_is_expected() {
        let sent = vec![sent("a", 0)];
        let got = vec![delivered(&sent[0]), delivered(&sent[0])];
        let error = check_exactly_once(&sent, "T", &got).unwrap_err();
        assert!(
            error.contains("a: delivered 2 time(s), expected 1"),
            "{error}"
        );
    }

    #[test]
    fn two_deliveries_pass_when_two_are_expected() {
        let sent = vec![sent("a", 0)];
        let got = vec![delivered(&sent[0]), delivered(&sent[0])];
        assert_eq!(check_deliveries(&sent, "T", &got, 2), Ok(()));
    }

    #[test]
    fn an_unexpected_message_is_reported() {
        let sent = vec![sent("a", 0)];
        let mut got = vec![delivered(&sent[0])];
        got.push(delivered(&self::sent("zzz", 9)));
        let error = check_exactly_once(&sent, "T", &got).unwrap_err();
        assert!(error.contains("unexpected message"), "{error}");
    }

    #[test]
    fn wrong_body_tags_keys_topic_and_index_are_each_reported() {
        let sent = vec![sent("a", 0)];
        let mut got = delivered(&sent[0]);
        got.body = b"other".to_vec();
        got.tags = Some("TagB".to_string());
        got.keys.push("extra".to_string());
        got.topic = "U".to_string();
        got.index = Some("7".to_string());
        let error = check_exactly_once(&sent, "T", &[got]).unwrap_err();
        for needle in [
            "body of 5 bytes",
            "tags Some(\"TagB\")",
            "keys [",
            "topic \"U\"",
            "E2E_INDEX",
        ] {
            assert!(error.contains(needle), "{needle} not in {error}");
        }
    }

    #[test]
    fn duplicate_sent_keys_are_a_test_bug() {
        let sent = vec![sent("a", 0), sent("a", 1)];
        assert!(index_sent(&sent).is_err());
    }

    #[test]
    fn missing_ids_lists_only_undelivered_messages() {
        let sent = vec![sent("a", 0), sent("b", 1), sent("c", 2)];
        let got = vec![delivered(&sent[1])];
        let missing: Vec<&str> = missing_ids(&sent, &got).into_iter().collect();
        assert_eq!(missing, vec!["a", "c"]);
    }

    fn orders() -> (Vec<Sent>, BTreeMap<String, (String, u32)>) {
        let mut sent_messages = Vec::new();
        let mut order_of = BTreeMap::new();
        for step in 0..3 {
            for order in ["x", "y"] {
                let id = format!("{order}{step}");
                sent_messages.push(sent(&id, step));
                order_of.insert(id, (order.to_string(), step));
            }
        }
        (sent_messages, order_of)
    }

    #[test]
    fn per_key_order_passes_when_each_key_is_in_order() {
        let (sent, order_of) = orders();
        // Interleaving between keys is free; within a key the steps ascend.
        let got: Vec<Delivery> = ["y0", "x0", "x1", "y1", "y2", "x2"]
            .iter()
            .map(|id| delivered(sent.iter().find(|m| m.id() == *id).unwrap()))
            .collect();
        assert_eq!(check_per_key_order(&got, &order_of), Ok(()));
    }

    #[test]
    fn per_key_order_fails_on_a_swap_within_a_key() {
        let (sent, order_of) = orders();
        let got: Vec<Delivery> = ["x0", "x2", "x1", "y0", "y1", "y2"]
            .iter()
            .map(|id| delivered(sent.iter().find(|m| m.id() == *id).unwrap()))
            .collect();
        let error = check_per_key_order(&got, &order_of).unwrap_err();
        assert!(
            error.contains("order x: steps delivered as [0, 2, 1]"),
            "{error}"
        );
    }

    #[test]
    fn per_key_order_fails_on_a_repeat() {
        let (sent, order_of) = orders();
        let got: Vec<Delivery> = ["x0", "x1", "x1", "x2", "y0", "y1", "y2"]
            .iter()
            .map(|id| delivered(sent.iter().find(|m| m.id() == *id).unwrap()))
            .collect();
        assert!(check_per_key_order(&got, &order_of).is_err());
    }

    #[test]
    fn long_problem_lists_are_cut() {
        let problems: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
        let error = finish("x", problems).unwrap_err();
        assert!(error.contains("and 8 more"), "{error}");
        assert!(!error.contains("p19"), "{error}");
    }

    #[test]
    fn preview_shortens_long_bodies() {
        assert_eq!(preview(b"abc"), "\"abc\"");
        assert!(preview(&[b'x'; 100]).ends_with("..."));
    }
}
