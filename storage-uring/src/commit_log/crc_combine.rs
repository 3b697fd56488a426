//! CRC-32/IEEE (`java.util.zip.CRC32`, `crc32fast`) of a concatenation from
//! the CRCs of its parts, without reading the parts again.
//!
//! CRC-32 is linear over GF(2): for byte strings `a` and `b`,
//!
//! ```text
//!  crc(a ‖ b) = crc(a) · x^(8·len(b))  mod P   ⊕  crc(b)
//! ```
//!
//! (the pre- and post-inversion of the standard CRC cancel out). So joining
//! two CRCs is one multiplication modulo `P` by a power of `x`. Powers come
//! from four compile-time tables of 256 entries, `x^(8·256^k·i) mod P`, so
//! `x^(8·n)` for any 32-bit `n` is at most three products of table entries,
//! and a length below 256 needs none. A product is a carry-less
//! multiplication of two 32-bit polynomials (PCLMULQDQ on x86-64 when the
//! CPU has it, detected at run time; a portable loop otherwise) followed by a
//! reduction modulo `P` through four byte tables of the CRC (one lookup per
//! byte, independent of each other). [`Combiner`] keeps the power for the
//! last length, so a combination at a repeated length is one product.
//!
//! Polynomials are in the CRC's reflected bit order: bit 31 of a `u32` is the
//! coefficient of `x^0`, bit 0 that of `x^31`.
//!
//! # Invariants
//! - [`combine`]`(crc(a), crc(b), b.len()) == crc(a ‖ b)` for all `a`, `b`
//!   (property test against `crc32fast` over the concatenation).
//! - The only `unsafe` code is the call of the PCLMULQDQ function in
//!   `clmul`, made only after the CPU feature was detected.

/// The CRC-32/IEEE polynomial, reflected.
const POLY: u32 = 0xEDB8_8320;

/// `x^0` in the reflected order.
const X_POW_0: u32 = 1 << 31;

/// `a · b mod P`, bit by bit (compile-time tables and the portable path).
const fn multiply_mod_p_bitwise(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut bit = X_POW_0;
    while bit != 0 {
        if a & bit != 0 {
            product ^= b;
        }
        bit >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    product
}

/// The byte table of the reflected CRC: `BYTE_TABLE[n] = n · x^32 mod P`
/// for the 8-bit polynomial `n` in the low byte.
static BYTE_TABLE: [u32; 256] = build_byte_table();

const fn build_byte_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut round = 0;
        while round < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            round += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
}

/// Levels of the power tables: level `k` holds `x^(8·256^k·i) mod P`.
const POWER_LEVELS: usize = 4;

/// `POWERS[k][i] = x^(8·256^k·i) mod P`.
static POWERS: [[u32; 256]; POWER_LEVELS] = build_power_tables();

const fn build_power_tables() -> [[u32; 256]; POWER_LEVELS] {
    let mut tables = [[0u32; 256]; POWER_LEVELS];
    // x^8 in the reflected order.
    let mut step = X_POW_0 >> 8;
    let mut level = 0;
    while level < POWER_LEVELS {
        tables[level][0] = X_POW_0;
        let mut i = 1;
        while i < 256 {
            tables[level][i] = multiply_mod_p_bitwise(tables[level][i - 1], step);
            i += 1;
        }
        // step^256 = x^(8·256^(level+1)).
        step = multiply_mod_p_bitwise(tables[level][255], step);
        level += 1;
    }
    tables
}

/// Carry-less product of two 32-bit polynomials (as integers: bit `i` of
/// the result is the XOR of `a_j · b_(i-j)`).
fn clmul(a: u32, b: u32) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("pclmulqdq") {
            // SAFETY: `clmul_pclmulqdq` only needs the PCLMULQDQ instruction
            // (SSE2 is part of x86-64), and the CPU was just found to have it.
            return unsafe { clmul_pclmulqdq(a, b) };
        }
    }
    clmul_portable(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq")]
fn clmul_pclmulqdq(a: u32, b: u32) -> u64 {
    use std::arch::x86_64::{_mm_clmulepi64_si128, _mm_cvtsi64_si128, _mm_cvtsi128_si64};
    let product = _mm_clmulepi64_si128(
        _mm_cvtsi64_si128(i64::from(a)),
        _mm_cvtsi64_si128(i64::from(b)),
        0x00,
    );
    _mm_cvtsi128_si64(product) as u64
}

fn clmul_portable(a: u32, b: u32) -> u64 {
    let wide = u64::from(a);
    let mut product = 0u64;
    for i in 0..32 {
        let take = 0u64.wrapping_sub(u64::from((b >> i) & 1));
        product ^= (wide << i) & take;
    }
    product
}

/// Whether [`combine`] runs on a hardware carry-less multiplication (then it
/// costs a few dozen instructions; otherwise several hundred).
pub fn is_hardware_accelerated() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `a · b mod P`.
fn multiply_mod_p(a: u32, b: u32) -> u32 {
    // Reflected operands: the integer product's bit i is the coefficient of
    // x^(62-i); one shift puts it in the reflected 64-bit order (bit i is
    // x^(63-i)). Its low half then holds x^63..x^32 (`high`), its high half
    // x^31..x^0 (`low`): the value is high·x^32 + low.
    let product = clmul(a, b) << 1;
    let high = product as u32;
    let low = (product >> 32) as u32;
    // high·x^32 mod P: four byte steps of the CRC register over zeros,
    // looked up one byte of `high` per table (the steps are linear, so the
    // four lookups are independent instead of a chain of four).
    let [b0, b1, b2, b3] = high.to_le_bytes();
    REDUCE_TABLES[0][b0 as usize]
        ^ REDUCE_TABLES[1][b1 as usize]
        ^ REDUCE_TABLES[2][b2 as usize]
        ^ REDUCE_TABLES[3][b3 as usize]
        ^ low
}

/// `register · x^32 mod P`: four byte steps of the CRC register over zeros.
const fn four_zero_byte_steps(mut register: u32) -> u32 {
    let mut step = 0;
    while step < 4 {
        register = (register >> 8) ^ BYTE_TABLE[(register & 0xFF) as usize];
        step += 1;
    }
    register
}

/// `REDUCE_TABLES[k][v]`: four byte steps of the CRC register over zeros
/// from the register holding `v` in its byte `k` (and zeros elsewhere).
static REDUCE_TABLES: [[u32; 256]; 4] = build_reduce_tables();

const fn build_reduce_tables() -> [[u32; 256]; 4] {
    let mut tables = [[0u32; 256]; 4];
    let mut k = 0;
    while k < 4 {
        let mut v = 0;
        while v < 256 {
            tables[k][v] = four_zero_byte_steps((v as u32) << (8 * k));
            v += 1;
        }
        k += 1;
    }
    tables
}

/// `x^(8·len) mod P`.
fn x_pow_8n(len: u64) -> u32 {
    assert!(
        len <= u64::from(u32::MAX),
        "combined length {len} exceeds 32 bits"
    );
    let mut power = X_POW_0;
    let mut rest = len;
    let mut level = 0;
    while rest != 0 {
        let digit = (rest & 0xFF) as usize;
        if digit != 0 {
            let entry = POWERS[level][digit];
            power = if power == X_POW_0 {
                entry
            } else {
                multiply_mod_p(power, entry)
            };
        }
        rest >>= 8;
        level += 1;
    }
    power
}

/// The CRC-32 of `a ‖ b` from `crc_a = crc(a)`, `crc_b = crc(b)` and the
/// length of `b` (at most `u32::MAX` bytes).
///
/// # Panics
/// If `len_b` exceeds `u32::MAX`.
pub fn combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    Combiner::default().combine(crc_a, crc_b, len_b)
}

/// [`combine`] with the power of `x` for the last length kept: records of a
/// producer tend to repeat their body length, and then a combination is one
/// product instead of two.
#[derive(Clone, Copy, Debug)]
pub struct Combiner {
    len: u64,
    power: u32,
}

impl Default for Combiner {
    fn default() -> Self {
        Combiner {
            len: 0,
            power: X_POW_0,
        }
    }
}

impl Combiner {
    /// As [`combine`]`(crc_a, crc_b, len_b)`.
    ///
    /// # Panics
    /// If `len_b` exceeds `u32::MAX`.
    pub fn combine(&mut self, crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
        if len_b == 0 {
            return crc_a;
        }
        if len_b != self.len {
            self.power = x_pow_8n(len_b);
            self.len = len_b;
        }
        multiply_mod_p(self.power, crc_a) ^ crc_b
    }
}

/// `x^63 mod P`, for the first of [`AroundBody`]'s fold multipliers.
const X_POW_63: u32 = {
    let mut power = X_POW_0;
    let mut step = 0;
    while step < 63 {
        power = multiply_mod_p_bitwise(power, X_POW_0 >> 1);
        step += 1;
    }
    power
};

/// `x^-1 mod P`: with `P = x^32 + … + p1·x + 1`, `x · (P - 1)/x ≡ 1`, and
/// `(P - 1)/x` is `P`'s bits above `x^0` moved down one degree.
const X_POW_MINUS_1: u32 = ((1u32 << 31) | (0x04C1_1DB7u32 >> 1)).reverse_bits();

/// The constants `crc32::wide::crc_around_body` needs for a body of
/// `body_len` bytes followed by `after_len` bytes up to the record CRC:
/// with `D = 8·(body_len + after_len)`, the fold multipliers
/// `x^(D+63)` and `x^(D-1)` mod P in the kernel's order (a reflected
/// 64-bit field, `x^0` in bit 63: this module's reflected `u32` moved up 32
/// bits), and `K = !0·(x^(8·after_len) + x^D) mod P`. Kept for the last
/// lengths, as [`Combiner`] keeps its power: on a change, each part costs
/// one power and one or two products.
#[derive(Clone, Copy, Debug)]
pub struct AroundBody {
    around_len: u64,
    after_len: u64,
    fold: [u64; 2],
    constant_around: u32,
    constant_after: u32,
}

impl Default for AroundBody {
    fn default() -> Self {
        // Lengths no record has, so the first call computes both parts.
        AroundBody {
            around_len: u64::MAX,
            after_len: u64::MAX,
            fold: [0; 2],
            constant_around: 0,
            constant_after: 0,
        }
    }
}

impl AroundBody {
    /// The fold multipliers and `K` for these lengths.
    ///
    /// # Panics
    /// If `after_len` is 0 or the two lengths add up to more than
    /// `u32::MAX`.
    pub fn constants(&mut self, body_len: u64, after_len: u64) -> ([u64; 2], u32) {
        assert!(after_len > 0, "no bytes after the body");
        let around_len = body_len + after_len;
        if around_len != self.around_len {
            let power = x_pow_8n(around_len);
            let in_kernel_order = |power: u32| u64::from(power) << 32;
            self.fold = [
                in_kernel_order(multiply_mod_p(power, X_POW_63)),
                in_kernel_order(multiply_mod_p(power, X_POW_MINUS_1)),
            ];
            self.constant_around = multiply_mod_p(u32::MAX, power);
            self.around_len = around_len;
        }
        if after_len != self.after_len {
            self.constant_after = multiply_mod_p(u32::MAX, x_pow_8n(after_len));
            self.after_len = after_len;
        }
        (self.fold, self.constant_around ^ self.constant_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn multiplication_by_x_pow_0_is_the_identity() {
        for a in [0u32, 1, 0xDEAD_BEEF, u32::MAX, X_POW_0] {
            assert_eq!(multiply_mod_p(a, X_POW_0), a);
            assert_eq!(multiply_mod_p(X_POW_0, a), a);
        }
    }

    #[test]
    fn hardware_and_portable_products_agree() {
        let samples = [0u32, 1, 2, 0x8000_0001, 0xDEAD_BEEF, u32::MAX, 0x1234_5678];
        for a in samples {
            for b in samples {
                assert_eq!(clmul(a, b), clmul_portable(a, b), "{a:#x} · {b:#x}");
                assert_eq!(
                    multiply_mod_p(a, b),
                    multiply_mod_p_bitwise(a, b),
                    "{a:#x} · {b:#x} mod P"
                );
            }
        }
    }

    #[test]
    fn power_tables_agree_with_repeated_multiplication() {
        let x8 = X_POW_0 >> 8;
        let mut power = X_POW_0;
        for len in 0..2_000u64 {
            assert_eq!(x_pow_8n(len), power, "x^(8·{len})");
            power = multiply_mod_p_bitwise(power, x8);
        }
    }

    #[test]
    fn combining_with_an_empty_string_keeps_the_crc() {
        let crc = crc32fast::hash(b"abc");
        assert_eq!(combine(crc, crc32fast::hash(b""), 0), crc);
    }

    #[test]
    fn combining_across_every_table_level_matches_one_pass() {
        let a = b"prefix bytes";
        for len_b in [1usize, 255, 256, 257, 65_535, 65_536, 70_001, 1 << 24] {
            let b: Vec<u8> = (0..len_b).map(|i| (i * 7 % 253) as u8).collect();
            let mut whole = a.to_vec();
            whole.extend_from_slice(&b);
            assert_eq!(
                combine(crc32fast::hash(a), crc32fast::hash(&b), len_b as u64),
                crc32fast::hash(&whole),
                "b of {len_b} bytes"
            );
        }
    }

    #[test]
    fn reduction_tables_agree_with_four_byte_steps() {
        for high in [0u32, 1, 0xFF, 0x100, 0xDEAD_BEEF, u32::MAX, X_POW_0] {
            let register = four_zero_byte_steps(high);
            let [b0, b1, b2, b3] = high.to_le_bytes();
            let looked_up = REDUCE_TABLES[0][b0 as usize]
                ^ REDUCE_TABLES[1][b1 as usize]
                ^ REDUCE_TABLES[2][b2 as usize]
                ^ REDUCE_TABLES[3][b3 as usize];
            assert_eq!(looked_up, register, "{high:#x}");
        }
    }

    #[test]
    fn x_pow_minus_1_times_x_is_one() {
        assert_eq!(multiply_mod_p(X_POW_MINUS_1, X_POW_0 >> 1), X_POW_0);
        assert_eq!(multiply_mod_p_bitwise(X_POW_63, X_POW_0 >> 1), x_pow_8n(8));
    }

    proptest! {
        #[test]
        fn a_combiner_agrees_with_combine_whatever_the_lengths_before(
            steps in proptest::collection::vec((any::<u32>(), any::<u32>(), 0u64..70_000), 1..20),
        ) {
            let mut combiner = Combiner::default();
            for (crc_a, crc_b, len_b) in steps {
                prop_assert_eq!(combiner.combine(crc_a, crc_b, len_b), combine(crc_a, crc_b, len_b));
            }
        }

        #[test]
        fn combine_equals_the_crc_of_the_concatenation(
            a in proptest::collection::vec(any::<u8>(), 0..300),
            b in proptest::collection::vec(any::<u8>(), 0..3_000),
        ) {
            let mut whole = a.clone();
            whole.extend_from_slice(&b);
            prop_assert_eq!(
                combine(crc32fast::hash(&a), crc32fast::hash(&b), b.len() as u64),
                crc32fast::hash(&whole)
            );
        }
    }
}
