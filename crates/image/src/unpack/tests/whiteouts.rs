//! Whiteouts and opaque directories across layers, and the writer pool
//! keeping entry order semantics.

use std::os::unix::fs::MetadataExt;

use tar::EntryType;

use super::*;

#[test]
fn whiteout_removes_lower_file_and_tree() {
    let l1 = Layer::new()
        .file("etc/keep", b"k")
        .file("etc/drop", b"d")
        .file("var/cache/a/b", b"b")
        .symlink("lnk", "/etc")
        .build();
    let l2 = Layer::new()
        .file("etc/.wh.drop", b"")
        .file("var/.wh.cache", b"")
        .file(".wh.lnk", b"")
        .file("etc/.wh.never-existed", b"")
        .file("nodir/.wh.x", b"")
        .build();
    let u = unpack_ok(&[l1, l2]);
    assert_eq!(u.read("etc/keep"), "k");
    assert!(!u.exists("etc/drop"));
    assert!(!u.exists("var/cache"));
    assert!(u.exists("var"));
    assert!(!u.exists("lnk"));
    assert!(!u.exists("etc/.wh.drop"), "whiteouts never appear");
    assert!(!u.exists("nodir"));
}

#[test]
fn whiteout_never_removes_same_layer_entries() {
    let l1 = Layer::new().file("a", b"lower").file("b", b"lower").build();
    // The new `a` comes after its whiteout, the new `b` before.
    let l2 = Layer::new()
        .file(".wh.a", b"")
        .file("a", b"upper")
        .file("b", b"upper")
        .file(".wh.b", b"")
        .build();
    let u = unpack_ok(&[l1, l2]);
    assert_eq!(u.read("a"), "upper");
    assert_eq!(u.read("b"), "upper");
}

#[test]
fn opaque_marker_before_and_after_own_entries() {
    let l1 = Layer::new()
        .file("o1/lower", b"l")
        .file("o1/sub/lower", b"l")
        .file("o2/lower", b"l")
        .file("o2/sub/lower", b"l")
        .file("other/lower", b"l")
        .build();
    let l2 = Layer::new()
        .dir("o1", 0o755)
        .file("o1/.wh..wh..opq", b"")
        .file("o1/new", b"n")
        // Marker after this layer's own entries, including one in a
        // subdirectory that also held lower files.
        .dir("o2", 0o755)
        .file("o2/new", b"n")
        .file("o2/sub/new", b"n")
        .file("o2/.wh..wh..opq", b"")
        .build();
    let l3 = Layer::new().file("o2/third", b"3").build();
    let u = unpack_ok(&[l1, l2, l3]);
    assert!(!u.exists("o1/lower"));
    assert!(!u.exists("o1/sub"));
    assert_eq!(u.read("o1/new"), "n");
    assert!(!u.exists("o1/.wh..wh..opq"));
    assert!(!u.exists("o2/lower"));
    assert_eq!(u.read("o2/new"), "n");
    assert_eq!(u.read("o2/sub/new"), "n");
    assert!(
        !u.exists("o2/sub/lower"),
        "lower children of a re-made subdir are hidden"
    );
    assert_eq!(u.read("o2/third"), "3");
    assert_eq!(u.read("other/lower"), "l");
}

#[test]
fn docker_whiteout_with_typeflag_0_and_linkname() {
    let l1 = Layer::new().file("x/f", b"1").build();
    let l2 = Layer::new()
        .raw(b"x/.wh.f", EntryType::Regular, b"x/.wh.f", b"")
        .raw(b"x/g", EntryType::Regular, b"some/link", b"data")
        .build();
    let u = unpack_ok(&[l1, l2]);
    assert!(!u.exists("x/f"));
    assert!(!u.exists("x/.wh.f"));
    assert_eq!(
        u.read("x/g"),
        "data",
        "typeflag 0 is a file whatever its link name"
    );
}

#[test]
fn writer_pool_keeps_entry_order_semantics() {
    let mut l1 = Layer::new()
        .file("old/f", b"lower")
        .file("swap", b"was file");
    for i in 0..300 {
        l1 = l1.file(
            &format!("many/{}/f{i}", i % 7),
            format!("content {i}").as_bytes(),
        );
    }
    let l2 = Layer::new()
        .file("p", b"one")
        .file("p", b"two")
        .hardlink("p-link", "p")
        .file("q", b"a file first")
        .dir("q", 0o755)
        .file("q/inside", b"in")
        .file("r", b"own")
        .file(".wh.r", b"")
        .file("old/f", b"upper")
        .dir("swap", 0o700)
        .file("swap/x", b"x")
        .file("many/3/f3", b"replaced")
        .build();
    let u = unpack_ok(&[l1.build(), l2]);
    assert_eq!(u.read("p"), "two");
    assert_eq!(u.meta("p-link").ino(), u.meta("p").ino());
    assert_eq!(u.read("q/inside"), "in");
    assert_eq!(u.read("r"), "own");
    assert_eq!(u.read("old/f"), "upper");
    assert_eq!(u.read("swap/x"), "x");
    assert_eq!(u.read("many/3/f3"), "replaced");
    assert_eq!(u.read("many/5/f299"), "content 299");
}

/// A named whiteout used to cache `d/sub` as the parent; the opaque marker
/// of `d` then removed `d/sub`, and `d/sub/new` went to the stale fd
/// (ENOENT). The new `d/sub/new` must land, the lower `d/sub/x` must go.
#[test]
fn opaque_marker_after_whiteout_in_removed_subdir() {
    let l1 = Layer::new()
        .file("d/sub/x", b"lower")
        .file("d/keep-not", b"lower")
        .build();
    let l2 = Layer::new()
        .file("d/sub/.wh.foo", b"")
        .file("d/.wh..wh..opq", b"")
        .file("d/sub/new", b"upper")
        .build();
    let u = unpack_ok(&[l1.clone(), l2]);
    assert_eq!(u.read("d/sub/new"), "upper");
    assert!(!u.exists("d/sub/x"));
    assert!(!u.exists("d/keep-not"));
    // The same with the cache inside the removed tree through a named
    // whiteout of the directory itself.
    let l3 = Layer::new()
        .file("d/sub/.wh.foo", b"")
        .file("d/.wh.sub", b"")
        .file("d/sub/again", b"a")
        .build();
    let u = unpack_ok(&[l1, l3]);
    assert_eq!(u.read("d/sub/again"), "a");
    assert!(!u.exists("d/sub/x"));
    assert_eq!(u.read("d/keep-not"), "lower");
}

/// An opaque marker for a directory no lower layer made creates it (the
/// layer says it exists), kept from a later opaque marker of the root in
/// the same layer; a named whiteout in a missing directory creates nothing.
#[test]
fn opaque_marker_of_missing_directory_creates_it() {
    let l1 = Layer::new().file("old", b"lower").build();
    let l2 = Layer::new()
        .file("new/deep/.wh..wh..opq", b"")
        .file("nodir/.wh.x", b"")
        .file(".wh..wh..opq", b"")
        .build();
    let u = unpack_ok(&[l1, l2]);
    assert!(u.meta("new/deep").is_dir());
    assert_eq!(u.meta("new/deep").mode() & 0o7777, 0o755);
    assert!(!u.exists("nodir"));
    assert!(!u.exists("old"));
}

/// A whiteout or opaque marker below a lower-layer non-directory has
/// nothing to remove: the load goes on and the file stays.
#[test]
fn whiteout_below_a_lower_file_removes_nothing() {
    let l1 = Layer::new().file("f", b"file").file("g", b"g").build();
    let l2 = Layer::new()
        .file("f/.wh.x", b"")
        .file("f/sub/.wh.y", b"")
        .file("f/.wh..wh..opq", b"")
        .file("after", b"ok")
        .build();
    let u = unpack_ok(&[l1, l2]);
    assert_eq!(u.read("f"), "file");
    assert_eq!(u.read("after"), "ok");
    assert_eq!(u.read("g"), "g");
}
