//! The RocketMQ remoting protocol, as pure functions over bytes.
//!
//! This crate encodes and decodes what a RocketMQ broker and name server
//! exchange with unmodified clients: remoting frames ([`frame`]), the
//! `RemotingCommand` header in its JSON and ROCKETMQ binary forms
//! ([`command`]), request and response codes ([`code`]), typed custom headers
//! ([`header`]), stored message records and batch bodies ([`message`]) and the
//! fastjson dialect of JSON bodies ([`json`]).
//!
//! It does no I/O, reads no clock and runs no async code: input is `&[u8]` or
//! [`bytes::Bytes`], output is values, or bytes written into a caller's buffer.

pub mod code;
pub mod command;
pub mod error;
pub mod frame;
pub mod header;
pub mod json;
pub mod limits;
pub mod message;
