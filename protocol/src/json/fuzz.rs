//! The fuzz entry point of the JSON layer, an ordinary function so that
//! `cargo test` and property tests can replay inputs on stable Rust.
//!
//! # Invariants
//!
//! - For any bytes: parsing does not panic; whatever parses, written in
//!   either style (compact or pretty), parses back to the same value (in the
//!   standard style integer keys come back as string keys); the typed
//!   decoders of heartbeat, route data, consume stats, topic and
//!   subscription-group wrappers and consumer offsets do not panic, and what
//!   they decode re-encodes and decodes to the same body.

use super::admin::ConsumeStats;
use super::bean::{JsonBean, decode, encode, encode_pretty, write_value};
use super::config_file::ConsumerOffsetFile;
use super::heartbeat::HeartbeatData;
use super::parse::parse;
use super::register::TopicConfigSerializeWrapper;
use super::route::TopicRouteData;
use super::subscription_group::SubscriptionGroupWrapper;
use super::value::{JsonKey, JsonNumber, JsonValue};

/// Largest long `BrowserCompatible` leaves unquoted.
const BROWSER_SAFE_LONG_MAX: u64 = (1 << 53) - 1;
use super::write::{JsonStyle, JsonWriter};

/// What the standard style (`BrowserCompatible`) turns a value into:
/// integer keys become their text, longs beyond ±(2^53−1) become strings.
fn standard_form(value: &JsonValue) -> JsonValue {
    match value {
        JsonValue::Array(items) => JsonValue::Array(items.iter().map(standard_form).collect()),
        JsonValue::Object(object) => {
            let mut out = object.clone();
            for (key, member) in &mut out.members {
                match key {
                    JsonKey::Int(v) => *key = JsonKey::Str(v.to_string()),
                    JsonKey::Object(inner) => **inner = standard_form(inner),
                    JsonKey::Str(_) => {}
                }
                *member = standard_form(member);
            }
            JsonValue::Object(out)
        }
        JsonValue::Number(JsonNumber::Int(v)) if v.unsigned_abs() > BROWSER_SAFE_LONG_MAX => {
            JsonValue::String(v.to_string())
        }
        other => other.clone(),
    }
}

fn write(value: &JsonValue, style: JsonStyle, pretty: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer = if pretty {
        JsonWriter::pretty(&mut out, style)
    } else {
        JsonWriter::new(&mut out, style)
    };
    write_value(&mut writer, value);
    writer.finish();
    out
}

fn check_typed<T: JsonBean + PartialEq + std::fmt::Debug>(data: &[u8]) {
    let Ok(body) = decode::<T>(data) else { return };
    let mut java = Vec::new();
    encode(&body, &mut java, JsonStyle::Java);
    assert_eq!(
        decode::<T>(&java).as_ref(),
        Ok(&body),
        "typed round trip, Java style"
    );
    let mut pretty = Vec::new();
    encode_pretty(&body, &mut pretty);
    assert_eq!(
        decode::<T>(&pretty).as_ref(),
        Ok(&body),
        "typed round trip, pretty"
    );
    // Opaque members may hold integer keys, which the standard style quotes:
    // check that one standard round trip reaches a fixed point instead.
    let mut standard = Vec::new();
    encode(&body, &mut standard, JsonStyle::Standard);
    let Ok(once) = decode::<T>(&standard) else {
        panic!(
            "standard style output does not decode: {:?}",
            String::from_utf8_lossy(&standard)
        );
    };
    let mut again = Vec::new();
    encode(&once, &mut again, JsonStyle::Standard);
    assert_eq!(again, standard, "standard style round trip is not stable");
}

/// Feeds `data` to the parser, the writer and the heartbeat / route
/// decoders, checking the invariants above.
///
/// # Panics
///
/// When an invariant is broken — that is the finding.
pub fn fuzz_json(data: &[u8]) {
    if let Ok(value) = parse(data) {
        for pretty in [false, true] {
            let java = write(&value, JsonStyle::Java, pretty);
            assert_eq!(
                parse(&java).as_ref(),
                Ok(&value),
                "Java style, pretty={pretty}"
            );
            let standard = write(&value, JsonStyle::Standard, pretty);
            assert_eq!(
                parse(&standard),
                Ok(standard_form(&value)),
                "standard, pretty={pretty}"
            );
        }
    }
    check_typed::<HeartbeatData>(data);
    check_typed::<TopicRouteData>(data);
    check_typed::<ConsumeStats>(data);
    check_typed::<TopicConfigSerializeWrapper>(data);
    check_typed::<SubscriptionGroupWrapper>(data);
    check_typed::<ConsumerOffsetFile>(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuzz_json_accepts_the_reference_examples_and_garbage() {
        let inputs: [&[u8]; 8] = [
            br#"{"brokerDatas":[{"brokerAddrs":{0:"a:1",1:"b:2"}}],"queueDatas":[]}"#,
            br#"{{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":5}}"#,
            br#"{"clientID":"c","consumerDataSet":[{"subscriptionDataSet":[{"codeSet":[1]}]}]}"#,
            br#"[1.5e3, -0, "\ud800", {'a':null}, {x:[]}]"#,
            b"\xff\xfe",
            b"[[[[[[[[[[",
            b"{\"a\":\"\\u00\"}",
            b"",
        ];
        for input in inputs {
            fuzz_json(input);
        }
    }
}
