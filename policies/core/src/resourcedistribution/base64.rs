//! Standard padded base64, as Kubernetes writes Secret `data`. Decoding
//! skips `\r` and `\n` like Go's decoder.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub(super) fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 0x3f) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The bytes, or `None` when the text is not padded standard base64.
pub(super) fn decode(text: &str) -> Option<Vec<u8>> {
    let symbols: Vec<u8> = text
        .bytes()
        .filter(|b| !matches!(b, b'\r' | b'\n'))
        .collect();
    if !symbols.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(symbols.len() / 4 * 3);
    let quads = symbols.chunks(4).count();
    for (index, quad) in symbols.chunks(4).enumerate() {
        let padding = quad.iter().rev().take_while(|b| **b == b'=').count();
        if padding > 2 || (padding > 0 && index + 1 != quads) {
            return None;
        }
        let mut n = 0u32;
        for &symbol in &quad[..4 - padding] {
            let value = ALPHABET.iter().position(|a| *a == symbol)?;
            n = (n << 6) | u32::try_from(value).ok()?;
        }
        n <<= 6 * padding;
        let [_, b0, b1, b2] = n.to_be_bytes();
        // Like Go's default (non-strict) decoding, bits left over in the
        // last symbol are ignored.
        out.extend_from_slice(&[b0, b1, b2][..3 - padding]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn round_trips() {
        for text in ["", "f", "fo", "foo", "foob", "fooba", "foobar"] {
            let encoded = encode(text.as_bytes());
            assert_eq!(decode(&encoded).unwrap(), text.as_bytes(), "{encoded}");
        }
        assert_eq!(encode(b"test"), "dGVzdA==");
        assert_eq!(decode("dGVz\ndA==").unwrap(), b"test");
    }

    #[test]
    fn refuses_what_go_refuses() {
        for bad in ["dGVzdA=", "dGVzdA", "dG=zdA==", "dGVzdA===", "d!=="] {
            assert_eq!(decode(bad), None, "{bad}");
        }
        assert_eq!(
            decode("dGVzdB==").unwrap(),
            b"test",
            "leftover bits are ignored"
        );
    }
}
