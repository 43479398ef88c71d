//! Sparse file maps: parsing the three encodings found in layers (old GNU
//! `S` headers with extension blocks, PAX 0.1 `GNU.sparse.map`, and the PAX
//! 1.0 decimal map at the start of the entry data) and checking them. The
//! map is a list of (offset, length) data chunks; everything else is a hole.

/// More chunks than this in one file is refused (bounds memory: 16 B each).
pub(crate) const MAX_CHUNKS: usize = 1 << 20;
/// Largest logical size of a sparse file. Holes cost no disk here, but a
/// rootfs full of multi-terabyte files is a bomb for whatever later copies
/// or scans it (overlay copy-up, backups, `du --apparent-size`). 64 GiB is
/// far above real sparse files in images (lastlog, core files, disk images
/// are stored non-sparse by docker anyway).
pub(crate) const MAX_SPARSE_SIZE: u64 = 64 << 30;

/// A checked sparse map: chunks ascending, non-overlapping, inside `real_size`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SparseMap {
    pub real_size: u64,
    pub chunks: Vec<(u64, u64)>,
}

impl SparseMap {
    /// Validates chunks against the logical size and the stored data size.
    pub(crate) fn new(
        real_size: u64,
        chunks: Vec<(u64, u64)>,
        stored: u64,
    ) -> Result<SparseMap, String> {
        if real_size > MAX_SPARSE_SIZE {
            return Err(format!(
                "sparse file of {real_size} bytes exceeds the {MAX_SPARSE_SIZE}-byte limit"
            ));
        }
        let mut end = 0u64;
        let mut sum = 0u64;
        for &(off, len) in &chunks {
            let chunk_end = off
                .checked_add(len)
                .ok_or_else(|| "sparse chunk overflows".to_string())?;
            if off < end {
                return Err(format!("sparse chunk at {off} overlaps or is out of order"));
            }
            if chunk_end > real_size {
                return Err(format!(
                    "sparse chunk {off}+{len} lies beyond the file size {real_size}"
                ));
            }
            end = chunk_end;
            sum += len;
        }
        if sum != stored {
            return Err(format!(
                "sparse map describes {sum} data bytes but the entry stores {stored}"
            ));
        }
        Ok(SparseMap { real_size, chunks })
    }
}

/// Parses `count` 24-byte (offset, numbytes) octal pairs of an old GNU
/// sparse header or extension block; an all-zero pair ends the list early.
pub(crate) fn parse_gnu_pairs(
    area: &[u8],
    count: usize,
    out: &mut Vec<(u64, u64)>,
) -> Result<(), String> {
    for i in 0..count {
        let pair = &area[i * 24..i * 24 + 24];
        if pair[0] == 0 {
            break;
        }
        let off =
            super::archive::parse_num(&pair[..12]).map_err(|e| format!("sparse offset: {e}"))?;
        let len =
            super::archive::parse_num(&pair[12..]).map_err(|e| format!("sparse length: {e}"))?;
        if out.len() >= MAX_CHUNKS {
            return Err("too many sparse chunks".into());
        }
        out.push((off, len));
    }
    Ok(())
}

/// Parses a PAX 0.1 `GNU.sparse.map` value: `off,len,off,len,...`.
pub(crate) fn parse_pax01_map(value: &[u8]) -> Result<Vec<(u64, u64)>, String> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    let mut nums = Vec::new();
    for field in value.split(|&b| b == b',') {
        nums.push(parse_decimal(field).ok_or("GNU.sparse.map has a bad number")?);
    }
    if nums.len() % 2 != 0 {
        return Err("GNU.sparse.map has an odd number of values".into());
    }
    if nums.len() / 2 > MAX_CHUNKS {
        return Err("too many sparse chunks".into());
    }
    Ok(nums.chunks(2).map(|p| (p[0], p[1])).collect())
}

/// Incremental parser of the PAX 1.0 map: decimal numbers each ending in
/// `\n` (count, then offset/length pairs), fed one 512-byte block at a time.
#[derive(Default)]
pub(crate) struct Pax10Map {
    nums: Vec<u64>,
    want: Option<usize>,
    cur: u64,
    digits: u32,
}

impl Pax10Map {
    /// Feeds one block; returns true once the whole map has been read (the
    /// rest of that block is padding).
    pub(crate) fn feed(&mut self, block: &[u8]) -> Result<bool, String> {
        for &b in block {
            if self.want == Some(self.nums.len()) {
                return Ok(true);
            }
            match b {
                b'0'..=b'9' => {
                    self.digits += 1;
                    self.cur = self
                        .cur
                        .checked_mul(10)
                        .and_then(|v| v.checked_add(u64::from(b - b'0')))
                        .ok_or("sparse map number overflows")?;
                }
                b'\n' if self.digits > 0 => {
                    self.nums.push(self.cur);
                    self.cur = 0;
                    self.digits = 0;
                    if self.want.is_none() {
                        let count = usize::try_from(self.nums[0])
                            .ok()
                            .filter(|&c| c <= MAX_CHUNKS)
                            .ok_or("too many sparse chunks")?;
                        self.want = Some(1 + 2 * count);
                    }
                }
                _ => return Err("sparse map is not decimal numbers".into()),
            }
        }
        Ok(self.want == Some(self.nums.len()))
    }

    pub(crate) fn into_chunks(self) -> Vec<(u64, u64)> {
        self.nums[1..].chunks(2).map(|p| (p[0], p[1])).collect()
    }
}

/// A plain decimal u64 (no sign, no spaces), as PAX values are written.
pub(crate) fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_checks_order_bounds_and_stored_size() {
        assert!(SparseMap::new(100, vec![(0, 10), (50, 10)], 20).is_ok());
        assert!(SparseMap::new(100, vec![(50, 10), (0, 10)], 20).is_err());
        assert!(SparseMap::new(100, vec![(95, 10)], 10).is_err());
        assert!(SparseMap::new(100, vec![(0, 10)], 11).is_err());
        assert!(SparseMap::new(u64::MAX, vec![(u64::MAX, 2)], 2).is_err());
        assert!(SparseMap::new(MAX_SPARSE_SIZE, vec![(0, 1)], 1).is_ok());
        let e = SparseMap::new(MAX_SPARSE_SIZE + 1, vec![(0, 1)], 1).unwrap_err();
        assert!(e.contains("exceeds"), "{e}");
    }

    #[test]
    fn pax01_map_parses_pairs() {
        assert_eq!(
            parse_pax01_map(b"0,5,4096,3").unwrap(),
            vec![(0, 5), (4096, 3)]
        );
        assert!(parse_pax01_map(b"0,5,4096").is_err());
        assert!(parse_pax01_map(b"0,x").is_err());
    }

    #[test]
    fn pax10_map_across_blocks() {
        let mut m = Pax10Map::default();
        assert!(!m.feed(b"2\n0\n").unwrap());
        assert!(m.feed(b"5\n4096\n3\n\0\0\0").unwrap());
        assert_eq!(m.into_chunks(), vec![(0, 5), (4096, 3)]);
        let mut bad = Pax10Map::default();
        assert!(bad.feed(b"99999999999\n").is_err());
        let mut junk = Pax10Map::default();
        assert!(junk.feed(b"1\nzz").is_err());
    }
}
