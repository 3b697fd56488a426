//! CRC-32/IEEE (`java.util.zip.CRC32`, RocketMQ's BODYCRC) of a byte string.
//!
//! Every append computes it over the body, for BODYCRC, and over the whole
//! record, for the record CRC property (storage-uring's `record_crc`); the
//! second reads only the bytes before and after the body and joins the
//! body's CRC to them ([`wide::crc_around_body`]). Bodies are mostly 100 B
//! to 4 KiB, where `crc32fast` (the fallback here) runs its 128-bit or
//! 256-bit kernels: its 512-bit kernel starts at 2 KiB, and its wider
//! kernels collapse their streams one after another, which at 1 KiB costs
//! as much as the folding itself. So on x86-64 CPUs with AVX-512 and
//! VPCLMULQDQ, inputs of 16 bytes and more take [`wide`]: one 512-bit
//! accumulator from 64 bytes, four from 256, joined as a tree, then a
//! Barrett reduction (docs/BENCHMARKS.md, "CRC-32 kernel").
//!
//! # The folding, in the bit order used here
//!
//! A CRC register or a loaded block is *reflected*: in a field of `w` bits,
//! bit `i` is the coefficient of `x^(w-1-i)`, so the first byte of a block
//! holds its highest powers, least significant bit first, as the CRC reads
//! them. A carry-less product of two reflected 64-bit fields `A` and `B` is
//! the reflected 128-bit field of `A·B·x` (the product has degree at most
//! 126, one below the top). A 128-bit block `X = H·x^64 + L` (low qword `H`,
//! high qword `L`) that ends `D` bits before the end of a block `Y`
//! contributes `X·x^D mod P` to it, so
//!
//! ```text
//! fold(X, D) = clmul(H, rfl(x^(D+63) mod P)) ⊕ clmul(L, rfl(x^(D-1) mod P))
//! ```
//!
//! is congruent to `X·x^D` and at most 96 bits wide; XORed into `Y` it
//! carries `X` forward. The constants are computed at compile time from `P`.
//!
//! # Invariants
//! - [`crc32_ieee`] equals `crc32fast::hash` for every input (tests over
//!   every length to 3 KiB at several alignments, and property tests).
//! - The wide kernel runs only after the CPU was found to have every feature
//!   its `#[target_feature]` list names, and reads only inside its slice.

/// The CRC-32/IEEE of `bytes` (unmasked), equal to `crc32fast::hash(bytes)`.
#[inline]
pub fn crc32_ieee(bytes: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if bytes.len() >= wide::INPUT_BYTES_MIN && wide::is_available() {
            // SAFETY: `is_available` found every CPU feature that
            // `update_checked` enables.
            return !unsafe { wide::update_checked(!0, bytes) };
        }
    }
    crc32_ieee_fallback(bytes)
}

/// `crc32fast`: what [`crc32_ieee`] runs for short inputs and on CPUs
/// without the wide kernel's features.
///
/// `crc32fast::hash` detects the CPU's features at every call; this clones
/// one hasher created (and detected) on first use, which costs a copy of a
/// few words.
pub fn crc32_ieee_fallback(bytes: &[u8]) -> u32 {
    static PROTOTYPE: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    let mut hasher = PROTOTYPE.get_or_init(crc32fast::Hasher::new).clone();
    hasher.update(bytes);
    hasher.finalize()
}

/// The generator polynomial in normal order: bit `d` is the coefficient of
/// `x^d`.
#[cfg(any(target_arch = "x86_64", test))]
const POLY: u64 = 0x1_04C1_1DB7;

/// `x^n mod POLY`, normal order.
#[cfg(any(target_arch = "x86_64", test))]
const fn x_pow_mod_poly(n: u32) -> u64 {
    let mut remainder: u64 = 1;
    let mut step = 0;
    while step < n {
        remainder <<= 1;
        if remainder & (1 << 32) != 0 {
            remainder ^= POLY;
        }
        step += 1;
    }
    remainder
}

/// `floor(x^64 / POLY)`, normal order (degree 32): Barrett's quotient.
#[cfg(any(target_arch = "x86_64", test))]
const fn barrett_quotient() -> u64 {
    let divisor = POLY as u128;
    let mut dividend: u128 = 1 << 64;
    let mut quotient: u64 = 0;
    let mut degree: u32 = 64;
    while degree >= 32 {
        if dividend & (1 << degree) != 0 {
            dividend ^= divisor << (degree - 32);
            quotient |= 1 << (degree - 32);
        }
        degree -= 1;
    }
    quotient
}

/// A polynomial of degree below 64 as a reflected 64-bit field.
#[cfg(any(target_arch = "x86_64", test))]
const fn reflected(normal: u64) -> u64 {
    normal.reverse_bits()
}

/// The multipliers that move a 128-bit block `bits` later: of its low
/// qword, then of its high one (module doc).
#[cfg(any(target_arch = "x86_64", test))]
const fn fold_multipliers(bits: u32) -> [u64; 2] {
    [
        reflected(x_pow_mod_poly(bits + 63)),
        reflected(x_pow_mod_poly(bits - 1)),
    ]
}

#[cfg(target_arch = "x86_64")]
pub mod wide {
    //! The AVX-512 VPCLMULQDQ kernel (module doc of [`super`]).
    //!
    //! `update_checked(state, data)` takes the CRC register (the inverted
    //! CRC) and returns it after `data`, for `data` of at least
    //! [`INPUT_BYTES_MIN`] bytes:
    //! 1. The register is XORed into the first four bytes (a register is
    //!    the remainder still owed by the bytes before).
    //! 2. From 256 bytes, four 512-bit accumulators (sixteen 128-bit lanes)
    //!    fold the input 256 bytes at a time, then join as a tree: 0 into 2
    //!    and 1 into 3 (1,024 bits apart), then 2 into 3. From 64 bytes, one
    //!    accumulator folds 64 bytes at a time. Its four lanes then join into
    //!    one 128-bit block, each moved by the bits to the last lane.
    //! 3. Whole 16-byte blocks left fold in one at a time; a last partial
    //!    block of `t` bytes is joined with shuffles: the block's first `t`
    //!    bytes move 128 bits forward onto the 16 bytes that end the input.
    //! 4. The 128-bit block `X` is reduced to `X·x^32 mod P`: 128 to 96 to
    //!    64 bits by folding, then Barrett.

    use std::arch::x86_64::{
        __m128i, __m512i, _mm_and_si128, _mm_blendv_epi8, _mm_clmulepi64_si128, _mm_cvtsi32_si128,
        _mm_cvtsi64_si128, _mm_extract_epi32, _mm_loadu_si128, _mm_set_epi64x, _mm_shuffle_epi8,
        _mm_slli_si128, _mm_srli_epi64, _mm_srli_si128, _mm_xor_si128, _mm512_castsi512_si128,
        _mm512_clmulepi64_epi128, _mm512_extracti32x4_epi32, _mm512_loadu_si512,
        _mm512_maskz_mov_epi64, _mm512_set_epi64, _mm512_ternarylogic_epi64, _mm512_xor_si512,
        _mm512_zextsi128_si512,
    };

    use super::{POLY, barrett_quotient, fold_multipliers, reflected, x_pow_mod_poly};

    /// Shorter inputs go to `crc32fast`: below one 128-bit block there is
    /// nothing to fold.
    pub const INPUT_BYTES_MIN: usize = 16;

    const FOLD_128: [u64; 2] = fold_multipliers(128);
    const FOLD_512: [u64; 2] = fold_multipliers(512);
    const FOLD_1024: [u64; 2] = fold_multipliers(1024);
    const FOLD_2048: [u64; 2] = fold_multipliers(2048);
    /// Lanes 0, 1 and 2 of an accumulator to lane 3: 384, 256, 128 bits.
    const LANES_TO_LAST: [[u64; 2]; 3] = [
        fold_multipliers(384),
        fold_multipliers(256),
        fold_multipliers(128),
    ];
    /// `X·x^32` for `X = H·x^64 + L` is `H·x^96 + L·x^32`.
    const REDUCE_96: u64 = reflected(x_pow_mod_poly(95));
    const REDUCE_64: u64 = reflected(x_pow_mod_poly(63));
    const BARRETT_QUOTIENT: u64 = reflected(barrett_quotient());
    const POLY_REFLECTED: u64 = reflected(POLY);

    /// PSHUFB masks for a last partial block of `t` bytes, read at offset
    /// `t` (a mask byte with its top bit set selects a zero byte): `k - 16`
    /// (wrapping, so set below 16) moves a block's first `t` bytes to its
    /// top; `k` below 16 moves its last `16 - t` bytes to its bottom.
    const SHUFFLE_TO_TOP: [u8; 32] = {
        let mut mask = [0u8; 32];
        let mut k = 0;
        while k < 32 {
            mask[k] = (k as u8).wrapping_sub(16);
            k += 1;
        }
        mask
    };
    const SHUFFLE_TO_BOTTOM: [u8; 32] = {
        let mut mask = [0u8; 32];
        let mut k = 0;
        while k < 32 {
            mask[k] = if k < 16 { k as u8 } else { 0x80 };
            k += 1;
        }
        mask
    };

    /// Whether this CPU has what [`update_checked`] needs (cached by std).
    #[inline]
    pub fn is_available() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("vpclmulqdq")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("sse4.1")
    }

    /// The CRC register after `data` from `state` (module doc).
    ///
    /// # Safety
    /// The CPU must have the features [`is_available`] checks.
    ///
    /// # Panics
    /// If `data` is shorter than [`INPUT_BYTES_MIN`].
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.1,ssse3")]
    pub unsafe fn update_checked(state: u32, data: &[u8]) -> u32 {
        reduce(fold_all(state, data))
    }

    /// Steps 1 to 3 of the module doc: `data` (at least
    /// [`INPUT_BYTES_MIN`] bytes) folded from the register `state` into one
    /// 128-bit block ending where `data` ends, not yet reduced.
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.1,ssse3")]
    fn fold_all(state: u32, data: &[u8]) -> __m128i {
        assert!(
            data.len() >= INPUT_BYTES_MIN,
            "{} bytes for the wide CRC kernel",
            data.len()
        );
        let seed = _mm_cvtsi32_si128(state as i32);
        let (mut block, rest) = if data.len() >= 64 {
            let (wide, rest) = fold_512(_mm512_zextsi128_si512(seed), data);
            (lanes_to_one(wide), rest)
        } else {
            let (first, rest) = data.split_at(16);
            (_mm_xor_si128(load_128(first), seed), rest)
        };
        let multipliers = pair_128(FOLD_128);
        let mut blocks = rest.chunks_exact(16);
        for next in &mut blocks {
            block = fold_128(block, load_128(next), multipliers);
        }
        let tail = blocks.remainder().len();
        if tail > 0 {
            let last = load_128(&data[data.len() - 16..]);
            block = join_partial(block, last, tail);
        }
        block
    }

    /// Bytes after the body that [`crc_around_body`] needs: the register it
    /// carries in is XORed into the first four.
    pub const AFTER_BODY_BYTES_MIN: usize = 4;

    /// The CRC-32 (unmasked, as `crc32fast::hash`) of `record[..covered]`,
    /// whose bytes `record[body]` have the CRC-32 `body_crc`, reading only
    /// the bytes around the body: `A = record[..body.start]` and `C =
    /// record[body.end..covered]`. With `B` the body, `a` the register after
    /// `A` from `!0`, and `D = 8·(|B| + |C|)`, CRC-32's linearity gives the
    /// register after the whole as
    ///
    /// ```text
    /// R = a·x^D  ⊕  (the register after C from crc(B))  ⊕  K,
    /// K = !0·(x^(8|C|) + x^D) mod P
    /// ```
    ///
    /// (`!0 ⊕ a` is the register A leaves once the body's own `!0` start is
    /// taken out, and `!crc(B) = crc(B) ⊕ !0`). `a·x^D` is A's unreduced
    /// block moved `D` bits by the two products of a fold (module doc of
    /// [`super`]), XORed into C's block before the one reduction: A and C
    /// are independent, and nothing is reduced twice. The CRC is `!R`.
    ///
    /// `fold` is `[rfl(x^(D+63) mod P), rfl(x^(D-1) mod P)]` and `constant`
    /// is `K`, both in this module's reflected 64-bit and the register's
    /// order; they depend on the lengths only, so callers keep them.
    ///
    /// # Safety
    /// The CPU must have the features [`is_available`] checks.
    ///
    /// # Panics
    /// If `A` is shorter than [`INPUT_BYTES_MIN`] or `C` than
    /// [`AFTER_BODY_BYTES_MIN`], or the ranges are not in order inside
    /// `record`.
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.1,ssse3")]
    pub unsafe fn crc_around_body(
        record: &[u8],
        body: std::ops::Range<usize>,
        covered: usize,
        body_crc: u32,
        fold: [u64; 2],
        constant: u32,
    ) -> u32 {
        assert!(
            body.start >= INPUT_BYTES_MIN
                && body.start <= body.end
                && body.end + AFTER_BODY_BYTES_MIN <= covered
                && covered <= record.len(),
            "body {body:?} and {covered} covered bytes in a record of {}",
            record.len()
        );
        let before = fold_all(!0, &record[..body.start]);
        let after_len = covered - body.end;
        let after = if after_len >= INPUT_BYTES_MIN {
            fold_all(body_crc, &record[body.end..covered])
        } else {
            // C in one block: the 16 bytes that end it (the body or the
            // header before it, inside the record since A has 16 bytes) with
            // all but C's zeroed, which a register of zero reads as nothing,
            // and the register XORed into C's first four bytes.
            let last = load_128(&record[covered - 16..covered]);
            let keep = load_128(&KEEP_LAST[after_len..after_len + 16]);
            let to_top = load_128(&SHUFFLE_TO_TOP[after_len..after_len + 16]);
            let register = _mm_shuffle_epi8(_mm_cvtsi32_si128(body_crc as i32), to_top);
            _mm_xor_si128(_mm_and_si128(last, keep), register)
        };
        let multipliers = pair_128(fold);
        let moved = _mm_xor_si128(
            _mm_clmulepi64_si128::<0x00>(before, multipliers),
            _mm_clmulepi64_si128::<0x11>(before, multipliers),
        );
        !(reduce(_mm_xor_si128(moved, after)) ^ constant)
    }

    /// AND masks that keep a block's last `t` bytes, read at offset `t`.
    const KEEP_LAST: [u8; 32] = {
        let mut mask = [0u8; 32];
        let mut k = 16;
        while k < 32 {
            mask[k] = 0xFF;
            k += 1;
        }
        mask
    };

    /// Folds the whole 64-byte groups of `data` (at least one) into one
    /// accumulator, the seed XORed into the first; returns it and the rest.
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn fold_512(seed: __m512i, data: &[u8]) -> (__m512i, &[u8]) {
        let (mut acc, rest) = if data.len() >= 256 {
            let (head, rest) = data.split_at(256);
            let mut accs = [
                _mm512_xor_si512(load_512(&head[..64]), seed),
                load_512(&head[64..128]),
                load_512(&head[128..192]),
                load_512(&head[192..]),
            ];
            let multipliers = pair_512(FOLD_2048);
            let mut groups = rest.chunks_exact(256);
            for group in &mut groups {
                for (acc, next) in accs.iter_mut().zip(group.chunks_exact(64)) {
                    *acc = fold_lanes(*acc, load_512(next), multipliers);
                }
            }
            let [a0, a1, a2, a3] = accs;
            let half = pair_512(FOLD_1024);
            let joined = fold_lanes(
                fold_lanes(a0, a2, half),
                fold_lanes(a1, a3, half),
                pair_512(FOLD_512),
            );
            (joined, groups.remainder())
        } else {
            let (head, rest) = data.split_at(64);
            (_mm512_xor_si512(load_512(head), seed), rest)
        };
        let multipliers = pair_512(FOLD_512);
        let mut groups = rest.chunks_exact(64);
        for next in &mut groups {
            acc = fold_lanes(acc, load_512(next), multipliers);
        }
        (acc, groups.remainder())
    }

    /// The four 128-bit lanes of `acc` as one block ending where lane 3 ends.
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn lanes_to_one(acc: __m512i) -> __m128i {
        let [m0, m1, m2] = LANES_TO_LAST;
        let multipliers = _mm512_set_epi64(
            0,
            0,
            m2[1] as i64,
            m2[0] as i64,
            m1[1] as i64,
            m1[0] as i64,
            m0[1] as i64,
            m0[0] as i64,
        );
        // Lane 3 is not moved: its multipliers are zero and it is XORed in
        // as it is.
        let moved = fold_lanes(acc, _mm512_maskz_mov_epi64(0b1100_0000, acc), multipliers);
        _mm_xor_si128(
            _mm_xor_si128(
                _mm512_castsi512_si128(moved),
                _mm512_extracti32x4_epi32::<1>(moved),
            ),
            _mm_xor_si128(
                _mm512_extracti32x4_epi32::<2>(moved),
                _mm512_extracti32x4_epi32::<3>(moved),
            ),
        )
    }

    /// Joins a last partial block of `tail` bytes (1..16), which end the
    /// input in `last` (the input's last 16 bytes), to `block`.
    #[target_feature(enable = "pclmulqdq,sse4.1,ssse3")]
    fn join_partial(block: __m128i, last: __m128i, tail: usize) -> __m128i {
        assert!((1..16).contains(&tail), "partial block of {tail} bytes");
        let to_top = load_128(&SHUFFLE_TO_TOP[tail..tail + 16]);
        let to_bottom = load_128(&SHUFFLE_TO_BOTTOM[tail..tail + 16]);
        // The block's first `tail` bytes, 16 bytes before the input's end.
        let head = _mm_shuffle_epi8(block, to_top);
        // Its other bytes, then the tail (where `to_top` is not negative).
        let end = _mm_blendv_epi8(last, _mm_shuffle_epi8(block, to_bottom), to_top);
        fold_128(head, end, pair_128(FOLD_128))
    }

    /// `X·x^32 mod P` of the block `X`, as a CRC register. Stays in vector
    /// registers to the end: moves to and from general registers between the
    /// products made this the slowest part of a short input's CRC.
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn reduce(block: __m128i) -> u32 {
        // 128 to 96 bits: H·x^96 (a product) plus L·x^32 (L moved down by
        // 32 bits of field, four bytes).
        let high = _mm_clmulepi64_si128::<0x00>(block, _mm_cvtsi64_si128(REDUCE_96 as i64));
        let low = _mm_slli_si128::<4>(_mm_srli_si128::<8>(block));
        let y = _mm_xor_si128(high, low);
        // 96 to 64: y's bits 32..63 are its degrees 95..64, times x^64. The
        // 64-bit Z is then the high qword: Zh in its bits 64..95, Zl in
        // 96..127.
        let folded = _mm_clmulepi64_si128::<0x00>(y, _mm_cvtsi64_si128(REDUCE_64 as i64));
        let z = _mm_xor_si128(folded, y);
        // Barrett: T = floor(Zh·q / x^32) lands in bits 31..62 of Zh·q's
        // product; shifted to bits 1..32 it is the field of T·x^31, whose
        // product with P is T·P·x^32: T·P mod x^32 in bits 64..95, lane 2.
        let zh = _mm_and_si128(z, _mm_set_epi64x(0xFFFF_FFFF, 0));
        let constants = _mm_set_epi64x(POLY_REFLECTED as i64, BARRETT_QUOTIENT as i64);
        let zh_q = _mm_clmulepi64_si128::<0x01>(zh, constants);
        let t = _mm_and_si128(_mm_srli_epi64::<30>(zh_q), _mm_set_epi64x(0, 0x1_FFFF_FFFE));
        let t_p = _mm_clmulepi64_si128::<0x10>(t, constants);
        // Z mod P = Zl + (T·P mod x^32).
        (_mm_extract_epi32::<3>(z) ^ _mm_extract_epi32::<2>(t_p)) as u32
    }

    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn fold_128(block: __m128i, next: __m128i, multipliers: __m128i) -> __m128i {
        let low = _mm_clmulepi64_si128::<0x00>(block, multipliers);
        let high = _mm_clmulepi64_si128::<0x11>(block, multipliers);
        _mm_xor_si128(_mm_xor_si128(low, high), next)
    }

    /// [`fold_128`] in each of the four lanes.
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn fold_lanes(acc: __m512i, next: __m512i, multipliers: __m512i) -> __m512i {
        let low = _mm512_clmulepi64_epi128::<0x00>(acc, multipliers);
        let high = _mm512_clmulepi64_epi128::<0x11>(acc, multipliers);
        // 0x96: the XOR of all three operands.
        _mm512_ternarylogic_epi64::<0x96>(low, high, next)
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn pair_128([low, high]: [u64; 2]) -> __m128i {
        _mm_set_epi64x(high as i64, low as i64)
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn pair_512([low, high]: [u64; 2]) -> __m512i {
        let (low, high) = (low as i64, high as i64);
        _mm512_set_epi64(high, low, high, low, high, low, high, low)
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn load_128(bytes: &[u8]) -> __m128i {
        assert!(bytes.len() == 16, "a 128-bit load of {} bytes", bytes.len());
        // SAFETY: the 16 bytes read are the slice's; the load is unaligned.
        unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load_512(bytes: &[u8]) -> __m512i {
        assert!(bytes.len() == 64, "a 512-bit load of {} bytes", bytes.len());
        // SAFETY: the 64 bytes read are the slice's; the load is unaligned.
        unsafe { _mm512_loadu_si512(bytes.as_ptr().cast()) }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn pseudo_random_bytes(len: usize, seed: u64) -> Vec<u8> {
        let mut state = seed | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    }

    #[test]
    fn crc32_ieee_of_the_check_string_is_the_catalogued_value() {
        assert_eq!(crc32_ieee(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32_ieee(b""), 0);
    }

    #[test]
    fn crc32_ieee_equals_crc32fast_at_every_length_to_3_kib_and_several_alignments() {
        let bytes = pseudo_random_bytes(3 * 1024 + 64, 0x5EED);
        for len in 0..=3 * 1024 {
            for start in [0, 1, 7, 33] {
                let input = &bytes[start..start + len];
                assert_eq!(
                    crc32_ieee(input),
                    crc32fast::hash(input),
                    "{len} bytes at {start}"
                );
            }
        }
    }

    #[test]
    fn crc32_ieee_equals_crc32fast_on_all_zero_and_all_one_inputs() {
        for len in [16, 63, 64, 255, 256, 257, 1000, 4096] {
            for byte in [0x00, 0xFF] {
                let input = vec![byte; len];
                assert_eq!(
                    crc32_ieee(&input),
                    crc32fast::hash(&input),
                    "{len} x {byte:#x}"
                );
            }
        }
    }

    #[test]
    fn wide_kernel_continues_a_register_as_crc32fast_does() {
        #[cfg(target_arch = "x86_64")]
        {
            if !wide::is_available() {
                println!("skipped: this CPU lacks AVX-512 or VPCLMULQDQ");
                return;
            }
            let bytes = pseudo_random_bytes(700, 0xC0FFEE);
            for split in 0..=bytes.len() - wide::INPUT_BYTES_MIN {
                let mut expected = crc32fast::Hasher::new();
                expected.update(&bytes[..split]);
                let register = !expected.clone().finalize();
                expected.update(&bytes[split..]);
                // SAFETY: the features were detected above.
                let register = unsafe { wide::update_checked(register, &bytes[split..]) };
                assert_eq!(!register, expected.finalize(), "split at {split}");
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        println!("skipped: the wide kernel is x86-64 only");
    }

    #[test]
    fn barrett_quotient_times_poly_is_x64_minus_a_remainder_below_degree_32() {
        // floor(x^64 / P) · P = x^64 + (x^64 mod P): the remainder has degree < 32.
        let quotient = barrett_quotient();
        let mut product: u128 = 0;
        for bit in 0..64 {
            if quotient & (1 << bit) != 0 {
                product ^= u128::from(POLY) << bit;
            }
        }
        assert_eq!(product >> 32, 1 << 32, "quotient {quotient:#x}");
        assert_eq!(
            (product as u64) & 0xFFFF_FFFF,
            x_pow_mod_poly(64),
            "remainder"
        );
    }

    #[test]
    fn x_pow_mod_poly_is_poly_at_degree_32() {
        assert_eq!(x_pow_mod_poly(31), 1 << 31);
        assert_eq!(x_pow_mod_poly(32), POLY & 0xFFFF_FFFF);
        let multipliers = fold_multipliers(128);
        assert_eq!(multipliers[1], reflected(x_pow_mod_poly(127)));
    }

    proptest! {
        #[test]
        fn crc32_ieee_equals_crc32fast(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
            prop_assert_eq!(crc32_ieee(&bytes), crc32fast::hash(&bytes));
        }
    }
}
