//! libFuzzer target for the record parser: `cargo fuzz run record_parser` (see `fuzz/README.md`).
#![no_main]

mod framing_check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| framing_check::check(data));
