//! The bounded header scan of an outer (container) tar: reads each 512-byte
//! header, checks its checksum, folds in GNU long names and PAX `x` records
//! (capped like in layers: 64 KiB per long name, 1 MiB of PAX per member;
//! beyond that the archive is refused) and seeks past the data, so a member
//! of any size costs one header read. The header field parsing is the
//! layer parser's (`unpack::archive`); what differs is that data is skipped
//! by seeking, not read.

use std::io::{self, Read, Seek, SeekFrom};

use crate::unpack::archive::{
    check_checksum, check_size, cstr, entry_names, padding, parse_num, Pax, MAX_LONG_NAME, MAX_PAX,
};

const BLOCK: u64 = 512;

/// One member as found in the outer tar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scanned {
    /// Raw name: GNU long name, PAX `path` or ustar prefix/name.
    pub name: Vec<u8>,
    /// Raw link name: GNU long link, PAX `linkpath` or the header field.
    pub link: Vec<u8>,
    pub typeflag: u8,
    /// Offset of the data in the file.
    pub offset: u64,
    pub size: u64,
}

/// Extension headers seen since the last member.
#[derive(Default)]
struct Pending {
    pax: Pax,
    pax_bytes: u64,
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.pax.0.is_empty() && self.long_name.is_none() && self.long_link.is_none()
    }
}

/// Reads exactly one block; Ok(false) at a clean end of file before it.
fn read_block<R: Read>(r: &mut R, block: &mut [u8; 512]) -> Result<bool, String> {
    let mut got = 0;
    while got < block.len() {
        match r.read(&mut block[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err("truncated tar archive: the file ends inside a header".into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("cannot read the archive: {e}")),
        }
    }
    Ok(true)
}

/// Reads an extension header's data (already capped) and skips its padding.
fn read_ext<R: Read + Seek>(r: &mut R, pos: &mut u64, size: u64) -> Result<Vec<u8>, String> {
    let mut v = vec![0u8; usize::try_from(size).map_err(|_| "extension header too large")?];
    r.read_exact(&mut v).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => {
            "truncated tar archive: the file ends inside an extension header".to_string()
        }
        _ => format!("cannot read the archive: {e}"),
    })?;
    *pos += size;
    seek_to(r, pos, padding(size))?;
    Ok(v)
}

fn seek_to<R: Seek>(r: &mut R, pos: &mut u64, skip: u64) -> Result<(), String> {
    if skip == 0 {
        return Ok(());
    }
    let to = pos.checked_add(skip).ok_or("tar member offsets overflow")?;
    r.seek(SeekFrom::Start(to))
        .map_err(|e| format!("cannot seek in the archive: {e}"))?;
    *pos = to;
    Ok(())
}

/// Scans every member header from the current position (offset 0), calling
/// `visit` for each real member; stops at the end-of-archive block or at the
/// end of the file. `visit` may stop the scan with an error. The caller
/// checks that each member's data lies inside the file before reading it.
pub(crate) fn scan<R: Read + Seek>(
    r: &mut R,
    mut visit: impl FnMut(Scanned) -> Result<(), String>,
) -> Result<(), String> {
    let mut pos: u64 = 0;
    let mut pending = Pending::default();
    let mut block = [0u8; 512];
    loop {
        if !read_block(r, &mut block)? {
            if !pending.is_empty() {
                return Err("truncated tar archive: it ends after an extension header".into());
            }
            return Ok(());
        }
        pos += BLOCK;
        if block.iter().all(|&b| b == 0) {
            return Ok(());
        }
        let shown = String::from_utf8_lossy(cstr(&block[..100])).into_owned();
        let bad = |reason: String| format!("malformed tar archive at member `{shown}`: {reason}");
        check_checksum(&block).map_err(bad)?;
        let typeflag = block[156];
        let hsize = parse_num(&block[124..136])
            .and_then(check_size)
            .map_err(|e| bad(format!("size: {e}")))?;
        match typeflag {
            b'x' => {
                pending.pax_bytes += hsize;
                if pending.pax_bytes > MAX_PAX {
                    return Err(bad(format!(
                        "PAX headers of one member add up to more than {MAX_PAX} bytes"
                    )));
                }
                let data = read_ext(r, &mut pos, hsize)?;
                pending.pax.parse(&data).map_err(bad)?;
            }
            b'L' | b'K' => {
                if hsize > MAX_LONG_NAME {
                    return Err(bad(format!(
                        "GNU long name of {hsize} bytes exceeds the {MAX_LONG_NAME}-byte limit"
                    )));
                }
                let slot = if typeflag == b'L' {
                    &mut pending.long_name
                } else {
                    &mut pending.long_link
                };
                if slot.is_some() {
                    return Err(bad("two GNU long name headers for one member".into()));
                }
                let data = read_ext(r, &mut pos, hsize)?;
                *slot = Some(cstr(&data).to_vec());
            }
            // Global PAX headers and volume labels carry nothing we use.
            b'g' | b'V' => seek_to(r, &mut pos, hsize + padding(hsize))?,
            _ => {
                let member = finish(r, &mut pos, &block, hsize, std::mem::take(&mut pending))
                    .map_err(bad)?;
                let skip = member.size + padding(member.size);
                visit(member)?;
                seek_to(r, &mut pos, skip)?;
            }
        }
    }
}

/// Builds a member from its header and the pending extensions; for an old
/// GNU sparse member, also reads past its extension blocks.
fn finish<R: Read + Seek>(
    r: &mut R,
    pos: &mut u64,
    block: &[u8; 512],
    hsize: u64,
    pending: Pending,
) -> Result<Scanned, String> {
    let (name, link) = entry_names(block, &pending.pax, pending.long_name, pending.long_link);
    let size = check_size(pending.pax.num("size")?.unwrap_or(hsize))?;
    let typeflag = block[156];
    if typeflag == b'S' && block[482] != 0 {
        // Old GNU sparse: extension blocks of the map precede the data.
        let mut ext = [0u8; 512];
        loop {
            if !read_block(r, &mut ext)? {
                return Err("the file ends inside a sparse header".into());
            }
            *pos += BLOCK;
            if ext[504] == 0 {
                break;
            }
        }
    }
    Ok(Scanned {
        name,
        link,
        typeflag,
        offset: *pos,
        size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn scan_all(bytes: &[u8]) -> Result<Vec<Scanned>, String> {
        let mut out = Vec::new();
        scan(&mut Cursor::new(bytes), |m| {
            out.push(m);
            Ok(())
        })?;
        Ok(out)
    }

    /// Offsets, sizes, names and links agree with what tar-rs reads, for
    /// long names, long links, PAX paths and ustar prefixes.
    #[test]
    fn scan_matches_tar_rs() {
        let mut b = tar::Builder::new(Vec::new());
        let long = format!("{}/file", "d".repeat(150));
        let longlink = "t".repeat(200);
        let mut h = tar::Header::new_gnu();
        h.set_size(3);
        h.set_mode(0o644);
        b.append_data(&mut h, &long, &b"abc"[..]).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, "lnk", &longlink).unwrap();
        b.append_pax_extensions([("path", &b"pax/name"[..])])
            .unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_path("short").unwrap();
        h.set_size(700);
        h.set_cksum();
        b.append(&h, &[7u8; 700][..]).unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_path(format!("{}/y", "p".repeat(120))).unwrap();
        h.set_size(1);
        h.set_cksum();
        b.append(&h, &b"y"[..]).unwrap();
        let bytes = b.into_inner().unwrap();

        let ours = scan_all(&bytes).unwrap();
        let mut theirs = Vec::new();
        let mut a = tar::Archive::new(Cursor::new(&bytes));
        for e in a.entries().unwrap() {
            let e = e.unwrap();
            theirs.push((
                e.path_bytes().into_owned(),
                e.link_name_bytes()
                    .map(|l| l.into_owned())
                    .unwrap_or_default(),
                e.raw_file_position(),
                e.size(),
            ));
        }
        let ours: Vec<_> = ours
            .into_iter()
            .map(|m| (m.name, m.link, m.offset, m.size))
            .collect();
        assert_eq!(ours, theirs);
        assert_eq!(ours[2].0, b"pax/name");
    }

    /// The scanner names members as the unpacker does (`entry_names`): a
    /// PAX sparse member by its `GNU.sparse.name`, not the placeholder path.
    #[test]
    fn scan_names_a_pax_sparse_member_by_its_real_name() {
        let mut b = tar::Builder::new(Vec::new());
        b.append_pax_extensions([
            ("path", &b"GNUSparseFile.0/data"[..]),
            ("GNU.sparse.name", &b"real/data"[..]),
        ])
        .unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_path("GNUSparseFile.0/data").unwrap();
        h.set_size(1);
        h.set_cksum();
        b.append(&h, &b"x"[..]).unwrap();
        let ours = scan_all(&b.into_inner().unwrap()).unwrap();
        assert_eq!(ours.len(), 1);
        assert_eq!(ours[0].name, b"real/data");
    }

    /// Headers announcing huge extension data are refused from the header
    /// alone, before anything is read or allocated.
    #[test]
    fn scan_caps_extension_headers() {
        for (flag, size, want) in [
            (b'L', 300u64 << 20, "GNU long name"),
            (b'K', 1 << 40, "GNU long name"),
            (b'x', MAX_PAX + 1, "PAX headers"),
        ] {
            let mut h = tar::Header::new_gnu();
            h.as_gnu_mut().unwrap().name[..13].copy_from_slice(b"././@LongLink");
            h.set_entry_type(tar::EntryType::new(flag));
            h.set_size(size);
            h.set_cksum();
            // No data at all behind the header: nothing may be read.
            let e = scan_all(h.as_bytes()).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn scan_refuses_bad_checksums_and_truncation() {
        let mut h = tar::Header::new_gnu();
        h.set_path("f").unwrap();
        h.set_size(0);
        h.set_cksum();
        let mut bytes = h.as_bytes().to_vec();
        bytes[0] = b'g';
        let e = scan_all(&bytes).unwrap_err();
        assert!(e.contains("checksum"), "{e}");
        let e = scan_all(&h.as_bytes()[..300]).unwrap_err();
        assert!(e.contains("truncated"), "{e}");
        assert!(scan_all(&[]).unwrap().is_empty());
    }
}
