//! Compression sniffing and decoding. Whether a stream is gzip or zstd is
//! decided by its magic bytes only: real tools mislabel media types (skopeo
//! marks plain tar layers as gzip), so names and media types are never trusted.
//! gzip streams may hold several members (pigz, concatenated files); zstd
//! streams several frames: both are decoded to the end.

use std::fmt;
use std::io::{self, BufRead, Read};

/// gzip member magic (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// zstd frame magic (RFC 8878), little-endian 0xFD2FB528.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Read buffer for compressed input: large reads keep syscalls off the profile.
pub const READ_BUFFER: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// Decide from the first bytes of a stream (at least 4 when available).
    pub fn sniff(head: &[u8]) -> Compression {
        if head.starts_with(&GZIP_MAGIC) {
            Compression::Gzip
        } else if head.starts_with(&ZSTD_MAGIC) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }

    /// Wrap a buffered stream in the decoder for this compression.
    pub fn decoder<'a, R: BufRead + Send + 'a>(
        self,
        input: R,
    ) -> io::Result<Box<dyn Read + Send + 'a>> {
        Ok(match self {
            Compression::None => Box::new(input),
            Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(input)),
            // Frames are decoded back to back until the input ends.
            Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(input)?),
        })
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Compression::None => "uncompressed",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        })
    }
}

/// Read up to `buf.len()` bytes, fewer only at end of stream.
pub fn read_head<R: Read + ?Sized>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn decode(c: Compression, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        c.decoder(io::BufReader::new(data))
            .unwrap()
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn sniffs_by_magic_only() {
        assert_eq!(Compression::sniff(&gzip(b"x")), Compression::Gzip);
        assert_eq!(
            Compression::sniff(&zstd::encode_all(&b"x"[..], 1).unwrap()),
            Compression::Zstd
        );
        assert_eq!(Compression::sniff(b"ustar"), Compression::None);
        assert_eq!(Compression::sniff(&[0x1f]), Compression::None);
        assert_eq!(Compression::sniff(b""), Compression::None);
    }

    #[test]
    fn gzip_decodes_every_member() {
        let mut two = gzip(b"hello ");
        two.extend(gzip(b"world"));
        assert_eq!(decode(Compression::Gzip, &two), b"hello world");
    }

    #[test]
    fn zstd_decodes_every_frame() {
        let mut two = zstd::encode_all(&b"hello "[..], 3).unwrap();
        two.extend(zstd::encode_all(&b"world"[..], 3).unwrap());
        assert_eq!(decode(Compression::Zstd, &two), b"hello world");
    }

    #[test]
    fn corrupt_gzip_is_an_error() {
        let mut bad = gzip(&[5u8; 10_000]);
        let n = bad.len();
        bad.truncate(n / 2);
        let mut out = Vec::new();
        assert!(Compression::Gzip
            .decoder(io::BufReader::new(&bad[..]))
            .unwrap()
            .read_to_end(&mut out)
            .is_err());
    }
}
