//! Tests of the fastz encoder: every stream inflates to the raw bytes given.

use super::bits::{eq_mask, same};
use super::*;

fn inflate(z: &[u8]) -> Vec<u8> {
    let mut d = flate2::read::ZlibDecoder::new(z);
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut d, &mut out).expect("valid zlib stream");
    out
}

#[test]
fn eq_mask_marks_equal_bytes() {
    let buf = [
        1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 0, 4, 5, 6, 7, 8, 9, 11,
    ];
    assert_eq!(eq_mask(&buf, 10, 0, 10), 0b01_1111_1011);
    assert_eq!(eq_mask(&buf, 10, 0, 7), 0b111_1011);
    let long: Vec<u8> = (0..200u32)
        .map(|i| (i % 50) as u8 ^ (i == 130) as u8)
        .collect();
    for n in 1..=64 {
        let want = (0..n).fold(0u64, |m, i| {
            m | ((long[100 + i] == long[50 + i]) as u64) << i
        });
        assert_eq!(eq_mask(&long, 100, 50, n), want, "n = {n}");
    }
}

/// `same` says whether the mask is all ones, at every length and distance.
#[test]
fn same_is_an_all_equal_mask() {
    let long: Vec<u8> = (0..300u32)
        .map(|i| (i % 50) as u8 ^ (i == 130 || i == 163) as u8)
        .collect();
    for n in 1..=64 {
        for (a, b) in [(100, 50), (150, 100), (200, 150), (120, 70)] {
            let all = eq_mask(&long, a, b, n) == u64::MAX >> (64 - n);
            assert_eq!(same(&long, a, b, n), all, "n = {n}, a = {a}");
        }
    }
}

#[test]
fn code_lengths_respect_the_limit_and_kraft() {
    // Fibonacci frequencies force a deep tree.
    let mut f = vec![0u32; 40];
    let (mut a, mut b) = (1u32, 1u32);
    for x in f.iter_mut() {
        *x = a;
        let c = a.saturating_add(b);
        a = b;
        b = c;
    }
    let l = code_lengths(&f, 15, &mut HuffmanScratch::new());
    assert!(l.iter().all(|&x| (1..=15).contains(&x)));
    let k: f64 = l.iter().map(|&x| 0.5f64.powi(x as i32)).sum();
    assert!(k <= 1.0 + 1e-12, "{k}");
    let one = code_lengths(&[0, 5, 0], 7, &mut HuffmanScratch::new());
    assert_eq!(one.iter().filter(|&&x| x > 0).count(), 2);
}

#[test]
fn streams_round_trip() {
    // Packet-like data: repeated templates with varying tails, plus random filler.
    let mut z = FastZ::new();
    let mut buf = Vec::new();
    let mut seed = 0x1234_5678u64;
    for round in 0..3 {
        for i in 0..20_000u64 {
            let start = buf.len();
            let track = i % 7;
            buf.extend_from_slice(&[0x0a, 12, 0x50, 3, 0x5a, 4, 0x48, 2, 0x58, track as u8]);
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let n = (seed >> 60) as usize;
            for k in 0..n {
                buf.push((seed >> (8 * (k % 7))) as u8);
            }
            if i % 1000 == 0 {
                buf.extend(std::iter::repeat_n(0xab, 300));
            }
            z.packet(&buf, start, track << 3 | 2, 2);
        }
        let out = z.finish(&buf);
        assert_eq!(inflate(&out), buf, "round {round}");
        assert!(
            out.len() < buf.len() * 3 / 4,
            "{} of {}",
            out.len(),
            buf.len()
        );
        buf.clear();
    }
    let empty = z.finish(&[]);
    assert!(inflate(&empty).is_empty());
}

/// Repeating packet sequences become matches that run on across packets (longer than one
/// packet, split at 258 bytes), and the stream still inflates to the raw bytes.
#[test]
fn repeats_run_on_across_packets() {
    let mut z = FastZ::new();
    let mut buf = Vec::new();
    let mut seed = 0x9876_5432u64;
    for i in 0..200_000u64 {
        let start = buf.len();
        // Bursts of 100 packets that repeat the burst before, one in 7 with a new byte.
        let lane = i % 100;
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let ts = if lane % 7 == 0 { (seed >> 57) as u8 } else { 0 };
        buf.extend_from_slice(&[
            0x0a,
            9,
            0x50,
            3,
            0x5a,
            4,
            0x58,
            0x80 | lane as u8,
            1,
            0x40,
            ts,
        ]);
        z.packet(&buf, start, (lane << 3 | 2) + 1, 2);
        if i % 70_000 == 69_999 {
            let out = z.finish(&buf);
            assert_eq!(inflate(&out), buf);
            assert!(out.len() * 12 < buf.len(), "{} of {}", out.len(), buf.len());
            buf.clear();
        }
    }
    let out = z.finish(&buf);
    assert_eq!(inflate(&out), buf);
}

/// Long packets (several segments) whose first byte alone repeats, and empty packets, are
/// tokenized byte by byte like any other (a long packet is never taken as a whole).
#[test]
fn long_and_empty_packets_round_trip() {
    let mut z = FastZ::new();
    let mut buf = Vec::new();
    for i in 0..3000u32 {
        let start = buf.len();
        buf.push(0x0a);
        buf.extend((0..100u32).map(|k| (k.wrapping_mul(2654435761) >> 13 ^ i) as u8));
        z.packet(&buf, start, 5, 3);
        z.packet(&buf, buf.len(), 6, 3);
    }
    let out = z.finish(&buf);
    assert_eq!(inflate(&out), buf);
}

/// `tokens_small` (one step per run) writes what the segment loop `tokens_long` writes for
/// packets of 1 to 64 bytes: runs of equal bytes at a distance of 3 bytes or more, shorter
/// ones at the start that go on with a pending match, literals elsewhere.
#[test]
fn small_packets_take_the_tokens_of_the_segment_loop() {
    let mut seed = 7u64;
    let mut rnd = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 33
    };
    for case in 0..3000 {
        let mut buf: Vec<u8> = (0..300).map(|_| rnd() as u8).collect();
        let mut z = FastZ::new();
        z.packet(&buf, 0, 0, 7);
        let d = 1 + (rnd() % 250) as usize;
        if case % 2 == 0 {
            // A match pending at `d`: 1 to 6 bytes equal to those `d` earlier.
            let k = 1 + case / 2 % 6;
            let at = buf.len();
            for i in at..at + k {
                buf.push(buf[i - d]);
            }
            z.run(&buf, at, k, d);
            z.done = buf.len();
        }
        let start = buf.len();
        let n = 1 + case % 64;
        // Equal bytes in runs: the chance of a byte equal to the one `d` earlier varies per
        // case (all different, all equal and in between).
        let p = rnd() % 9;
        for i in start..start + n {
            let b = if rnd() % 8 < p {
                buf[i - d]
            } else {
                !buf[i - d]
            };
            buf.push(b);
        }
        let mask = eq_mask(&buf, start, start - d, n);
        let (mut a, mut b) = (z.clone(), z);
        a.tokens_small(&buf, start, mask, d);
        b.tokens_long(&buf, start, mask, d);
        assert_eq!(
            (a.tokens, a.pend_len),
            (b.tokens, b.pend_len),
            "case {case}"
        );
        let za = a.finish(&buf);
        assert_eq!(za, b.finish(&buf), "case {case}: n {n}, mask {mask:#x}");
        assert_eq!(inflate(&za), buf);
    }
}
