//! A bounded, deterministic fuzz run of the record parser inside `cargo test`: 5,000 inputs made
//! by mutating real records (bytes flipped, inserted, deleted, lines spliced, numbers swapped for
//! NaN, 1e400, -1, huge ones), each checked by the same invariants as the libFuzzer target
//! (`fuzz/fuzz_targets/framing_check.rs`).

#[path = "../../fuzz/fuzz_targets/framing_check.rs"]
mod framing_check;

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const SEEDS: [&str; 4] = [
    r#"{"job_id":"j1","idem_key":"k1","attempt_no":1,"lane":"free","started_at":"2026-11-23T10:00:00Z","ended_at":"2026-11-23T10:00:02Z","outcome":"ok","tokens_in":100,"tokens_out":700,"artifact_id":"a1","http_status":200,"provider_code":0,"key_id":"k-9","pool_id":"pool-2"}"#,
    r#"{"job_id":"j1","decided_at":"2026-11-23T10:00:00Z","queue_age_s":1.5,"expected_service_s":2,"retry_tax_s":1,"deadline_slack_s":60,"decision":"admit_free","slack_miss":false}"#,
    "job_id,idem_key,attempt_no,lane,started_at,tokens_in\nj1,k1,1,free,2026-11-23T10:00:00Z,5\n\"j,2\",k2,2,paid,2026-11-23T10:00:00+01:00,\"7\"\n",
    "\u{feff}job_id,decided_at,queue_age_s,expected_service_s,retry_tax_s,deadline_slack_s,decision\r\nj1,2026-11-23T10:00:00Z,1,2,1,60,defer\r\n",
];

const SPLICES: [&[u8]; 12] = [
    b"NaN",
    b"1e400",
    b"-1",
    b"18446744073709551616",
    b"null",
    b"\"\"",
    b"\xff\xfe",
    b"\n",
    b"\r\n",
    b"\"",
    b",",
    b"{\"a\":{\"b\":[[[[[]]]]]}}",
];

fn mutate(rng: &mut u64, input: &mut Vec<u8>) {
    for _ in 0..1 + splitmix(rng) % 4 {
        let len = input.len().max(1);
        let at = (splitmix(rng) as usize) % len;
        match splitmix(rng) % 6 {
            0 if !input.is_empty() => input[at] ^= 1 << (splitmix(rng) % 8),
            1 => input.insert(at.min(input.len()), splitmix(rng) as u8),
            2 if !input.is_empty() => {
                let end = (at + 1 + (splitmix(rng) as usize) % 16).min(input.len());
                input.drain(at..end);
            }
            3 => {
                let s = SPLICES[(splitmix(rng) as usize) % SPLICES.len()];
                let at = at.min(input.len());
                input.splice(at..at, s.iter().copied());
            }
            4 => {
                let other = SEEDS[(splitmix(rng) as usize) % SEEDS.len()].as_bytes();
                input.push(b'\n');
                input.extend_from_slice(&other[..(splitmix(rng) as usize) % other.len()]);
            }
            _ => {
                let depth = 1 + (splitmix(rng) as usize) % 300;
                let at = at.min(input.len());
                input.splice(at..at, std::iter::repeat_n(b'[', depth));
            }
        }
    }
}

#[test]
fn five_thousand_mutated_inputs_keep_the_parser_invariants() {
    let mut rng = 0x5eed_u64;
    for seed in SEEDS {
        framing_check::check(seed.as_bytes());
    }
    for _ in 0..5_000 {
        let mut input = SEEDS[(splitmix(&mut rng) as usize) % SEEDS.len()].as_bytes().to_vec();
        mutate(&mut rng, &mut input);
        framing_check::check(&input);
    }
}
