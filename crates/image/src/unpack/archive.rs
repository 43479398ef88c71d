//! A streaming, bounded tar reader for layer streams: ustar, GNU (long
//! names, old sparse headers) and PAX (path, linkpath, size, uid/gid, mtime,
//! `SCHILY.xattr.*`, GNU sparse 0.1 and 1.0). Extension headers are capped in
//! size, every number is range-checked, and entry data is handed out straight
//! from one 1 MiB read buffer so that file contents are written with large
//! writes and no copy.

use std::io::{BufRead, BufReader, ErrorKind, Read};

use super::sparse::{self, Pax10Map, SparseMap};

/// Largest PAX extended header accepted (real ones are a few hundred bytes),
/// and the most PAX bytes one entry may carry over several `x` headers.
pub(crate) const MAX_PAX: u64 = 1 << 20;
/// Largest GNU long name/link entry accepted.
pub(crate) const MAX_LONG_NAME: u64 = 64 * 1024;
/// Largest entry size accepted: sizes are file offsets (i64) everywhere,
/// and this keeps `size + padding` from overflowing.
pub(crate) const MAX_ENTRY_SIZE: u64 = i64::MAX as u64;
const READ_BUF: usize = 1 << 20;
/// Most bytes accepted after the end-of-archive marker. Tools pad to their
/// record size (GNU tar: 10 KiB); more is refused so that a compression
/// bomb of trailing zeros (which must still be hashed) stays cheap.
const MAX_TRAILING: u64 = 64 << 20;
const BLOCK: usize = 512;

/// A malformed stream; `entry` names the entry when one is known.
#[derive(Debug)]
pub(crate) struct BadArchive {
    pub entry: Option<String>,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    Hardlink,
    Char,
    Block,
    Fifo,
}

/// One entry's metadata, with all extension headers folded in.
#[derive(Debug)]
pub(crate) struct Entry {
    /// Raw name as stored (not yet normalized).
    pub path: Vec<u8>,
    pub link: Vec<u8>,
    pub kind: Kind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Seconds and nanoseconds since the epoch.
    pub mtime: (i64, u32),
    pub dev_major: u32,
    pub dev_minor: u32,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    pub sparse: Option<SparseMap>,
}

pub(crate) struct TarStream<R: Read> {
    r: BufReader<R>,
    /// Data bytes of the current entry not yet consumed.
    remaining: u64,
    /// Padding after the current entry's data.
    pad: u64,
    /// Name of the current entry, for error messages.
    current: String,
    ended: bool,
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub(crate) fn padding(size: u64) -> u64 {
    (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64
}

pub(crate) fn cstr(field: &[u8]) -> &[u8] {
    match field.iter().position(|&b| b == 0) {
        Some(i) => &field[..i],
        None => field,
    }
}

/// The name a header block itself holds: `name`, behind the POSIX ustar
/// `prefix` when there is one (GNU headers use that space otherwise).
pub(crate) fn header_name(block: &[u8; 512]) -> Vec<u8> {
    let name = cstr(&block[..100]);
    let prefix = if &block[257..263] == b"ustar\0" {
        cstr(&block[345..500])
    } else {
        &[][..]
    };
    if prefix.is_empty() {
        name.to_vec()
    } else {
        [prefix, b"/", name].concat()
    }
}

/// A member's path and link target, by precedence: PAX `GNU.sparse.name`
/// (the real name of a PAX sparse member), PAX `path` / `linkpath`, a GNU
/// long name / long link, then the header's own fields.
pub(crate) fn entry_names(
    block: &[u8; 512],
    pax: &Pax,
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
) -> (Vec<u8>, Vec<u8>) {
    let path = match (pax.get("GNU.sparse.name").or(pax.get("path")), long_name) {
        (Some(p), _) => p.to_vec(),
        (None, Some(n)) => n,
        (None, None) => header_name(block),
    };
    let link = match (pax.get("linkpath"), long_link) {
        (Some(l), _) => l.to_vec(),
        (None, Some(l)) => l,
        (None, None) => cstr(&block[157..257]).to_vec(),
    };
    (path, link)
}

/// Parses a numeric header field: octal (space/NUL terminated) or GNU
/// base-256 (high bit set). Negative values are refused.
pub(crate) fn parse_num(field: &[u8]) -> Result<u64, String> {
    if field.first().is_some_and(|&b| b & 0x80 != 0) {
        if field[0] == 0xff {
            return Err("negative number".into());
        }
        let mut v = u64::from(field[0] & 0x7f);
        for &b in &field[1..] {
            v = v
                .checked_mul(256)
                .and_then(|v| v.checked_add(u64::from(b)))
                .ok_or("number overflows 64 bits")?;
        }
        return Ok(v);
    }
    let mut v: u64 = 0;
    let mut started = false;
    for &b in field {
        match b {
            b'0'..=b'7' => {
                started = true;
                v = v
                    .checked_mul(8)
                    .and_then(|v| v.checked_add(u64::from(b - b'0')))
                    .ok_or("number overflows 64 bits")?;
            }
            b' ' if !started => {}
            b' ' | 0 => break,
            _ => return Err(format!("invalid octal field {:?}", lossy(cstr(field)))),
        }
    }
    Ok(v)
}

/// An entry or header size, refused above `MAX_ENTRY_SIZE`.
pub(crate) fn check_size(size: u64) -> Result<u64, String> {
    if size > MAX_ENTRY_SIZE {
        Err(format!(
            "size {size} is too large (the limit is {MAX_ENTRY_SIZE} bytes)"
        ))
    } else {
        Ok(size)
    }
}

/// mtime may legitimately be negative (base-256 two's complement).
fn parse_time(field: &[u8]) -> Result<i64, String> {
    if field.first() == Some(&0xff) {
        let mut v: i64 = -1;
        for &b in &field[1..] {
            v = v
                .checked_mul(256)
                .and_then(|v| v.checked_add(i64::from(b)))
                .ok_or("time overflows")?;
        }
        return Ok(v);
    }
    let v = parse_num(field)?;
    i64::try_from(v).map_err(|_| "time overflows".to_string())
}

/// PAX `mtime`: `[-]SECONDS[.FRACTION]`.
fn parse_pax_time(v: &[u8]) -> Option<(i64, u32)> {
    let (neg, v) = match v.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, v),
    };
    let (secs, frac) = match v.iter().position(|&b| b == b'.') {
        Some(i) => (&v[..i], &v[i + 1..]),
        None => (v, &b""[..]),
    };
    let secs = i64::try_from(sparse::parse_decimal(secs)?).ok()?;
    let mut nanos: u32 = 0;
    for i in 0..9 {
        let d = match frac.get(i) {
            Some(b) if b.is_ascii_digit() => u32::from(b - b'0'),
            Some(_) => return None,
            None => 0,
        };
        nanos = nanos * 10 + d;
    }
    if neg {
        // -1.5 means 1.5 s before the epoch.
        if nanos > 0 {
            Some((-secs - 1, 1_000_000_000 - nanos))
        } else {
            Some((-secs, 0))
        }
    } else {
        Some((secs, nanos))
    }
}

/// PAX records `LEN KEY=VALUE\n`, later records overriding earlier ones.
/// Also used by `format` to scan the outer archive's headers.
#[derive(Default)]
pub(crate) struct Pax(pub(crate) Vec<(Vec<u8>, Vec<u8>)>);

impl Pax {
    pub(crate) fn parse(&mut self, mut data: &[u8]) -> Result<(), String> {
        while !data.is_empty() && data[0] != 0 {
            let sp = data
                .iter()
                .take(21)
                .position(|&b| b == b' ')
                .ok_or("PAX record without a length")?;
            let len = sparse::parse_decimal(&data[..sp])
                .and_then(|l| usize::try_from(l).ok())
                .filter(|&l| l > sp + 1 && l <= data.len())
                .ok_or("PAX record has a bad length")?;
            let rec = &data[sp + 1..len];
            let rec = rec
                .strip_suffix(b"\n")
                .ok_or("PAX record does not end in a newline")?;
            let eq = rec
                .iter()
                .position(|&b| b == b'=')
                .ok_or("PAX record without `=`")?;
            self.0.push((rec[..eq].to_vec(), rec[eq + 1..].to_vec()));
            data = &data[len..];
        }
        Ok(())
    }

    pub(crate) fn get(&self, key: &str) -> Option<&[u8]> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key.as_bytes())
            .map(|(_, v)| v.as_slice())
    }

    pub(crate) fn num(&self, key: &str) -> Result<Option<u64>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => sparse::parse_decimal(v)
                .map(Some)
                .ok_or_else(|| format!("PAX {key} is not a number: {:?}", lossy(v))),
        }
    }
}

impl<R: Read> TarStream<R> {
    pub(crate) fn new(r: R) -> Self {
        TarStream {
            r: BufReader::with_capacity(READ_BUF, r),
            remaining: 0,
            pad: 0,
            current: String::new(),
            ended: false,
        }
    }

    fn bad(&self, reason: impl Into<String>) -> BadArchive {
        BadArchive {
            entry: (!self.current.is_empty()).then(|| self.current.clone()),
            reason: reason.into(),
        }
    }

    fn read_err(&self, e: std::io::Error) -> BadArchive {
        self.bad(format!("failed to read the layer stream: {e}"))
    }

    /// Reads one block; Ok(false) on a clean end of stream before it.
    fn read_block(&mut self, block: &mut [u8; BLOCK]) -> Result<bool, BadArchive> {
        let mut got = 0;
        while got < BLOCK {
            match self.r.read(&mut block[got..]) {
                Ok(0) if got == 0 => return Ok(false),
                Ok(0) => return Err(self.bad("unexpected end of layer stream inside a header")),
                Ok(n) => got += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.read_err(e)),
            }
        }
        Ok(true)
    }

    /// Buffered data of the current entry: non-empty while data remains.
    pub(crate) fn data(&mut self) -> Result<&[u8], BadArchive> {
        if self.remaining == 0 {
            return Ok(&[]);
        }
        let remaining = self.remaining;
        if let Err(e) = self.r.fill_buf() {
            let e = std::io::Error::new(e.kind(), e.to_string());
            return Err(self.read_err(e));
        }
        if self.r.buffer().is_empty() {
            return Err(self.bad(format!(
                "unexpected end of layer stream ({remaining} bytes of data missing)"
            )));
        }
        let buf = self.r.buffer();
        let n = buf
            .len()
            .min(usize::try_from(remaining).unwrap_or(usize::MAX));
        Ok(&buf[..n])
    }

    pub(crate) fn consume(&mut self, n: usize) {
        self.r.consume(n);
        self.remaining -= n as u64;
    }

    /// Bytes of entry data still unread.
    pub(crate) fn remaining(&self) -> u64 {
        self.remaining
    }

    fn skip(&mut self, mut n: u64, what: &str) -> Result<(), BadArchive> {
        while n > 0 {
            let buf = self.r.fill_buf().map_err(|e| BadArchive {
                entry: None,
                reason: format!("failed to read the layer stream: {e}"),
            })?;
            if buf.is_empty() {
                return Err(self.bad(format!("unexpected end of layer stream in {what}")));
            }
            let k = buf.len().min(usize::try_from(n).unwrap_or(usize::MAX));
            self.r.consume(k);
            n -= k as u64;
        }
        Ok(())
    }

    /// Reads a whole (capped) extension entry's data plus padding.
    fn read_small(&mut self, size: u64) -> Result<Vec<u8>, BadArchive> {
        let mut v = vec![0u8; usize::try_from(size).unwrap_or(0)];
        if let Err(e) = self.r.read_exact(&mut v) {
            return Err(if e.kind() == ErrorKind::UnexpectedEof {
                self.bad("unexpected end of layer stream in an extended header")
            } else {
                self.read_err(e)
            });
        }
        self.skip(padding(size), "header padding")?;
        Ok(v)
    }

    /// Drains whatever follows the end-of-archive marker so that a hashing
    /// reader underneath sees the whole blob (at most `MAX_TRAILING` bytes).
    fn drain(&mut self) -> Result<(), BadArchive> {
        let mut total: u64 = 0;
        loop {
            let n = match self.r.fill_buf() {
                Ok(b) => b.len(),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.read_err(e)),
            };
            if n == 0 {
                return Ok(());
            }
            total += n as u64;
            if total > MAX_TRAILING {
                return Err(self.bad(format!(
                    "more than {MAX_TRAILING} bytes follow the end-of-archive marker"
                )));
            }
            self.r.consume(n);
        }
    }

    /// Advances to the next real entry, folding in GNU long names and PAX
    /// headers. Unread data of the previous entry is skipped.
    pub(crate) fn next_entry(&mut self) -> Result<Option<Entry>, BadArchive> {
        if self.ended {
            return Ok(None);
        }
        // Both are capped when set (`check_size`), so this cannot overflow.
        let rest = self.remaining.saturating_add(self.pad);
        self.skip(rest, "entry data")?;
        self.remaining = 0;
        self.pad = 0;
        self.current.clear();

        let mut pax = Pax::default();
        let mut long_name: Option<Vec<u8>> = None;
        let mut long_link: Option<Vec<u8>> = None;
        // PAX bytes seen for this entry over all its `x` headers.
        let mut pax_bytes: u64 = 0;
        let mut block = [0u8; BLOCK];
        loop {
            if !self.read_block(&mut block)? {
                if !pax.0.is_empty() || long_name.is_some() || long_link.is_some() {
                    return Err(self.bad("layer stream ends after an extension header"));
                }
                self.ended = true;
                return Ok(None);
            }
            if block.iter().all(|&b| b == 0) {
                self.ended = true;
                self.drain()?;
                return Ok(None);
            }
            self.current = lossy(cstr(&block[..100]));
            check_checksum(&block).map_err(|r| self.bad(r))?;
            let typeflag = block[156];
            let hsize = parse_num(&block[124..136])
                .and_then(check_size)
                .map_err(|e| self.bad(format!("size: {e}")))?;
            match typeflag {
                b'x' | b'g' => {
                    if hsize > MAX_PAX {
                        return Err(self.bad(format!(
                            "PAX header of {hsize} bytes exceeds the {MAX_PAX}-byte limit"
                        )));
                    }
                    // Consecutive `x` headers all add to one entry: cap their sum.
                    if typeflag == b'x' {
                        pax_bytes += hsize;
                        if pax_bytes > MAX_PAX {
                            return Err(self.bad(format!(
                                "PAX headers of one entry add up to more than {MAX_PAX} bytes"
                            )));
                        }
                    }
                    let data = self.read_small(hsize)?;
                    // Global headers carry nothing layers rely on; parse to validate only.
                    let mut target = Pax::default();
                    let into = if typeflag == b'x' {
                        &mut pax
                    } else {
                        &mut target
                    };
                    into.parse(&data).map_err(|r| self.bad(r))?;
                    continue;
                }
                b'L' | b'K' => {
                    if hsize > MAX_LONG_NAME {
                        return Err(self.bad(format!(
                            "GNU long name of {hsize} bytes exceeds the {MAX_LONG_NAME}-byte limit"
                        )));
                    }
                    let slot = if typeflag == b'L' {
                        &long_name
                    } else {
                        &long_link
                    };
                    // GNU tar writes at most one of each per entry.
                    if slot.is_some() {
                        return Err(self.bad(format!(
                            "two GNU long {} headers for one entry",
                            if typeflag == b'L' { "name" } else { "link" }
                        )));
                    }
                    let data = self.read_small(hsize)?;
                    let name = cstr(&data).to_vec();
                    if typeflag == b'L' {
                        long_name = Some(name);
                    } else {
                        long_link = Some(name);
                    }
                    continue;
                }
                b'V' => {
                    // hsize <= MAX_ENTRY_SIZE: no overflow.
                    self.skip(hsize + padding(hsize), "volume label")?;
                    continue;
                }
                b'M' | b'N' => {
                    return Err(self.bad(format!(
                        "unsupported GNU entry type `{}`",
                        char::from(typeflag)
                    )))
                }
                _ => {}
            }
            return self
                .finish_entry(&block, hsize, pax, long_name, long_link)
                .map(Some);
        }
    }

    fn finish_entry(
        &mut self,
        block: &[u8; BLOCK],
        hsize: u64,
        pax: Pax,
        long_name: Option<Vec<u8>>,
        long_link: Option<Vec<u8>>,
    ) -> Result<Entry, BadArchive> {
        let posix_ustar = &block[257..263] == b"ustar\0";
        let is_ustar = posix_ustar || &block[257..263] == b"ustar ";
        let (path, link) = entry_names(block, &pax, long_name, long_link);
        self.current = lossy(&path);
        let field = |r: std::ops::Range<usize>, what: &str| {
            parse_num(&block[r]).map_err(|e| format!("{what}: {e}"))
        };
        let id = |pax_key: &str, r: std::ops::Range<usize>, what: &str| -> Result<u32, String> {
            let v = match pax.num(pax_key)? {
                Some(v) => v,
                None => field(r, what)?,
            };
            u32::try_from(v).map_err(|_| format!("{what} {v} does not fit in 32 bits"))
        };
        let fields = (|| -> Result<_, String> {
            let mode = (field(100..108, "mode")? & 0o7777) as u32;
            let uid = id("uid", 108..116, "uid")?;
            let gid = id("gid", 116..124, "gid")?;
            let mtime = match pax.get("mtime") {
                Some(v) => parse_pax_time(v).ok_or("PAX mtime is not a time")?,
                None => (
                    parse_time(&block[136..148]).map_err(|e| format!("mtime: {e}"))?,
                    0,
                ),
            };
            let size =
                check_size(pax.num("size")?.unwrap_or(hsize)).map_err(|e| format!("entry {e}"))?;
            let (maj, min) = if is_ustar {
                (
                    field(329..337, "device major")?,
                    field(337..345, "device minor")?,
                )
            } else {
                (0, 0)
            };
            let dev_major = u32::try_from(maj).map_err(|_| "device major too large")?;
            let dev_minor = u32::try_from(min).map_err(|_| "device minor too large")?;
            Ok((mode, uid, gid, mtime, size, dev_major, dev_minor))
        })();
        let (mode, uid, gid, mtime, size, dev_major, dev_minor) =
            fields.map_err(|r| self.bad(r))?;

        let typeflag = block[156];
        let kind = match typeflag {
            b'1' => Kind::Hardlink,
            b'2' => Kind::Symlink,
            b'3' => Kind::Char,
            b'4' => Kind::Block,
            b'5' | b'D' => Kind::Dir,
            b'6' => Kind::Fifo,
            // Pre-POSIX archives mark directories by a trailing slash only.
            b'0' | 0 if path.ends_with(b"/") => Kind::Dir,
            // POSIX: unknown types are extracted as regular files.
            _ => Kind::File,
        };
        let xattrs = pax
            .0
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix(b"SCHILY.xattr.")
                    .map(|name| (name.to_vec(), v.clone()))
            })
            .collect();

        self.remaining = size;
        self.pad = padding(size);
        let sparse = if kind == Kind::File {
            self.sparse_map(block, &pax).map_err(|r| self.bad(r))?
        } else {
            None
        };
        Ok(Entry {
            path,
            link,
            kind,
            mode,
            uid,
            gid,
            mtime,
            dev_major,
            dev_minor,
            xattrs,
            sparse,
        })
    }

    /// Reads the sparse map of the current entry, if it is sparse. For PAX
    /// 1.0 this consumes the map blocks at the start of the data.
    fn sparse_map(&mut self, block: &[u8; BLOCK], pax: &Pax) -> Result<Option<SparseMap>, String> {
        if block[156] == b'S' {
            let mut chunks = Vec::new();
            sparse::parse_gnu_pairs(&block[386..482], 4, &mut chunks)?;
            let real_size = parse_num(&block[483..495]).map_err(|e| format!("sparse size: {e}"))?;
            let mut extended = block[482] != 0;
            let mut ext = [0u8; BLOCK];
            while extended {
                if !self.read_block(&mut ext).map_err(|e| e.reason)? {
                    return Err("unexpected end of layer stream in a sparse header".into());
                }
                sparse::parse_gnu_pairs(&ext[..504], 21, &mut chunks)?;
                extended = ext[504] != 0;
            }
            return SparseMap::new(real_size, chunks, self.remaining).map(Some);
        }
        if pax.get("GNU.sparse.offset").is_some() {
            return Err("PAX sparse format 0.0 is not supported".into());
        }
        let major = pax.num("GNU.sparse.major")?;
        let minor = pax.num("GNU.sparse.minor")?;
        let real = match pax.num("GNU.sparse.realsize")? {
            Some(v) => Some(v),
            None => pax.num("GNU.sparse.size")?,
        };
        match (major, minor) {
            (None, _) => match pax.get("GNU.sparse.map") {
                Some(map) => {
                    let chunks = sparse::parse_pax01_map(map)?;
                    let real = real.ok_or("PAX sparse 0.1 entry without GNU.sparse.size")?;
                    SparseMap::new(real, chunks, self.remaining).map(Some)
                }
                None => Ok(None),
            },
            (Some(1), Some(0)) => {
                let real = real.ok_or("PAX sparse 1.0 entry without GNU.sparse.realsize")?;
                let mut map = Pax10Map::default();
                let mut blk = [0u8; BLOCK];
                loop {
                    if self.remaining < BLOCK as u64 {
                        return Err("PAX sparse 1.0 map runs past the entry data".into());
                    }
                    if !self.read_block(&mut blk).map_err(|e| e.reason)? {
                        return Err("unexpected end of layer stream in a sparse map".into());
                    }
                    self.remaining -= BLOCK as u64;
                    if map.feed(&blk)? {
                        break;
                    }
                }
                SparseMap::new(real, map.into_chunks(), self.remaining).map(Some)
            }
            (Some(ma), mi) => Err(format!(
                "unsupported PAX sparse format {ma}.{}",
                mi.map_or("?".into(), |m| m.to_string())
            )),
        }
    }
}

pub(crate) fn check_checksum(block: &[u8; BLOCK]) -> Result<(), String> {
    let stored = parse_num(&block[148..156])
        .map_err(|_| "not a tar header (bad checksum field): garbage or corrupt layer stream")?;
    let mut unsigned: u64 = 0;
    let mut signed: i64 = 0;
    for (i, &b) in block.iter().enumerate() {
        let b = if (148..156).contains(&i) { b' ' } else { b };
        unsigned += u64::from(b);
        signed += i64::from(b as i8);
    }
    if stored == unsigned || i64::try_from(stored).is_ok_and(|s| s == signed) {
        Ok(())
    } else {
        Err("tar header checksum mismatch: garbage or corrupt layer stream".into())
    }
}
