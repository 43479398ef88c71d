//! Tests of the seccomp module: profile conversion, the compiled program's
//! decisions (through a BPF interpreter), and the cache.

use super::bpf::interp::{run, ARCH_X86_64};
use super::bpf::{RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS};
use super::*;
use crate::capabilities;
use oci_spec::runtime::{Capability, LinuxSeccompAction, LinuxSeccompOperator};

const EPERM: u32 = RET_ERRNO | 1;
const ENOSYS: u32 = RET_ERRNO | 38;

fn nr(name: &str) -> u32 {
    syscalls::number(name).unwrap()
}

fn default_caps() -> Capabilities {
    capabilities::bounding_set(&[], &[], false, 40).unwrap()
}

fn default_prog() -> BpfProgram {
    compile(&default_profile_for(&default_caps(), (6, 18)).unwrap()).unwrap()
}

fn call(p: &BpfProgram, name: &str, args: [u64; 6]) -> u32 {
    run(p.as_sock_filters(), nr(name), ARCH_X86_64, args)
}

#[test]
fn default_profile_allows_read_and_denies_mount_and_kexec() {
    let p = default_prog();
    for name in [
        "read",
        "write",
        "execve",
        "exit_group",
        "openat",
        "futex",
        "chroot",
        "arch_prctl",
    ] {
        assert_eq!(call(&p, name, [0; 6]), RET_ALLOW, "{name}");
    }
    for name in [
        "mount",
        "kexec_load",
        "umount2",
        "unshare",
        "setns",
        "reboot",
        "init_module",
        "bpf",
    ] {
        assert_eq!(call(&p, name, [0; 6]), EPERM, "{name}");
    }
    // A number no profile names gets the default action.
    assert_eq!(run(p.as_sock_filters(), 1000, ARCH_X86_64, [0; 6]), EPERM);
}

#[test]
fn foreign_arch_and_x32_are_killed_but_nr_minus_one_is_not() {
    let p = default_prog();
    let i386 = 0x4000_0003;
    assert_eq!(run(p.as_sock_filters(), 0, i386, [0; 6]), RET_KILL_PROCESS);
    assert_eq!(
        run(p.as_sock_filters(), 0x4000_0000, ARCH_X86_64, [0; 6]),
        RET_KILL_PROCESS
    );
    assert_eq!(
        run(p.as_sock_filters(), 0x4000_0001, ARCH_X86_64, [0; 6]),
        RET_KILL_PROCESS
    );
    assert_eq!(
        run(p.as_sock_filters(), u32::MAX, ARCH_X86_64, [0; 6]),
        EPERM
    );
}

#[test]
fn argument_filters_of_the_default_profile() {
    let p = default_prog();
    // personality: only the listed values, compared on all 64 bits.
    for v in [0u64, 8, 0x20000, 0x20008, 0xffff_ffff] {
        assert_eq!(
            call(&p, "personality", [v, 0, 0, 0, 0, 0]),
            RET_ALLOW,
            "{v:#x}"
        );
    }
    for v in [1u64, 0x1_0000_0000, 0x1_ffff_ffff] {
        assert_eq!(call(&p, "personality", [v, 0, 0, 0, 0, 0]), EPERM, "{v:#x}");
    }
    // socket: every family but AF_VSOCK (40).
    assert_eq!(call(&p, "socket", [2, 1, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(call(&p, "socket", [40, 1, 0, 0, 0, 0]), EPERM);
    assert_eq!(
        call(&p, "socket", [40 | (1 << 32), 1, 0, 0, 0, 0]),
        RET_ALLOW
    );
    // clone without namespace flags only; clone3 gets ENOSYS.
    let sigchld = 17u64;
    assert_eq!(
        call(&p, "clone", [0x3d0f00 | sigchld, 0, 0, 0, 0, 0]),
        RET_ALLOW
    );
    assert_eq!(
        call(&p, "clone", [0x1000_0000 | sigchld, 0, 0, 0, 0, 0]),
        EPERM
    );
    assert_eq!(call(&p, "clone", [0x0002_0000, 0, 0, 0, 0, 0]), EPERM);
    assert_eq!(call(&p, "clone3", [0; 6]), ENOSYS);
}

#[test]
fn sys_admin_unlocks_its_group() {
    let mut caps = default_caps();
    caps.insert(Capability::SysAdmin);
    let p = compile(&default_profile_for(&caps, (6, 18)).unwrap()).unwrap();
    assert_eq!(call(&p, "mount", [0; 6]), RET_ALLOW);
    assert_eq!(call(&p, "clone", [0x1000_0000, 0, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(call(&p, "clone3", [0; 6]), RET_ALLOW);
    assert_eq!(call(&p, "kexec_load", [0; 6]), EPERM);
}

#[test]
fn min_kernel_and_cap_gates() {
    let caps = default_caps();
    let new = default_profile_for(&caps, (6, 18)).unwrap();
    let old = default_profile_for(&caps, (4, 4)).unwrap();
    assert_eq!(call(&compile(&new).unwrap(), "ptrace", [0; 6]), RET_ALLOW);
    assert_eq!(call(&compile(&old).unwrap(), "ptrace", [0; 6]), EPERM);
    // Dropping SYS_CHROOT from the bounding set drops chroot from the allowlist.
    let no_chroot = capabilities::bounding_set(&[], &["SYS_CHROOT".into()], false, 40).unwrap();
    let p = compile(&default_profile_for(&no_chroot, (6, 18)).unwrap()).unwrap();
    assert_eq!(call(&p, "chroot", [0; 6]), EPERM);
    assert_eq!(new.default_action(), LinuxSeccompAction::ScmpActErrno);
    assert_eq!(new.default_errno_ret(), Some(1));
}

#[test]
fn default_profile_is_compact() {
    let p = default_prog();
    assert!(p.len() < 600, "{} instructions", p.len());
}

fn profile_from(json: &str) -> LinuxSeccomp {
    profile::DockerProfile::parse(json, Path::new("t.json"))
        .unwrap()
        .to_oci(&default_caps(), (6, 18), Path::new("t.json"))
        .unwrap()
        .unwrap()
}

#[test]
fn every_operator_matches_64_bit_semantics() {
    let values = [
        0u64,
        1,
        5,
        0xffff_ffff,
        0x1_0000_0000,
        0x1_0000_0005,
        0x5_0000_0000,
        u64::MAX,
    ];
    let ops = [
        ("SCMP_CMP_EQ", LinuxSeccompOperator::ScmpCmpEq),
        ("SCMP_CMP_NE", LinuxSeccompOperator::ScmpCmpNe),
        ("SCMP_CMP_LT", LinuxSeccompOperator::ScmpCmpLt),
        ("SCMP_CMP_LE", LinuxSeccompOperator::ScmpCmpLe),
        ("SCMP_CMP_GT", LinuxSeccompOperator::ScmpCmpGt),
        ("SCMP_CMP_GE", LinuxSeccompOperator::ScmpCmpGe),
        ("SCMP_CMP_MASKED_EQ", LinuxSeccompOperator::ScmpCmpMaskedEq),
    ];
    for (op_name, op) in ops {
        for &v in &values {
            let json = format!(
                r#"{{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{{"names":["write"],
                "action":"SCMP_ACT_ERRNO","errnoRet":5,
                "args":[{{"index":2,"value":{v},"valueTwo":{two},"op":"{op_name}"}}]}}]}}"#,
                two = v & 0x1_0000_0001,
            );
            let p = compile(&profile_from(&json)).unwrap();
            for &a in &values {
                let want = match op {
                    LinuxSeccompOperator::ScmpCmpEq => a == v,
                    LinuxSeccompOperator::ScmpCmpNe => a != v,
                    LinuxSeccompOperator::ScmpCmpLt => a < v,
                    LinuxSeccompOperator::ScmpCmpLe => a <= v,
                    LinuxSeccompOperator::ScmpCmpGt => a > v,
                    LinuxSeccompOperator::ScmpCmpGe => a >= v,
                    LinuxSeccompOperator::ScmpCmpMaskedEq => a & v == v & 0x1_0000_0001,
                };
                let got = call(&p, "write", [0, 0, a, 0, 0, 0]);
                let want = if want { RET_ERRNO | 5 } else { RET_ALLOW };
                assert_eq!(got, want, "{op_name} arg={a:#x} value={v:#x}");
            }
        }
    }
}

#[test]
fn conditions_and_within_a_rule_but_or_when_an_index_repeats() {
    let and = profile_from(
        r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["kill"],"action":"SCMP_ACT_ALLOW",
        "args":[{"index":0,"value":1,"op":"SCMP_CMP_EQ"},{"index":1,"value":9,"op":"SCMP_CMP_EQ"}]}]}"#,
    );
    let p = compile(&and).unwrap();
    assert_eq!(call(&p, "kill", [1, 9, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(call(&p, "kill", [1, 15, 0, 0, 0, 0]), EPERM);
    let or = profile_from(
        r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["kill"],"action":"SCMP_ACT_ALLOW",
        "args":[{"index":0,"value":1,"op":"SCMP_CMP_EQ"},{"index":0,"value":2,"op":"SCMP_CMP_EQ"}]}]}"#,
    );
    let p = compile(&or).unwrap();
    assert_eq!(call(&p, "kill", [1, 0, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(call(&p, "kill", [2, 0, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(call(&p, "kill", [3, 0, 0, 0, 0, 0]), EPERM);
}

#[test]
fn deny_list_profile_and_unknown_names() {
    let p = compile(&profile_from(
        r#"{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64"],
        "syscalls":[{"name":"mkdir","action":"SCMP_ACT_ERRNO"},
                    {"names":["no_such_call","getpid"],"action":"SCMP_ACT_KILL_PROCESS"}]}"#,
    ))
    .unwrap();
    assert_eq!(call(&p, "mkdir", [0; 6]), EPERM);
    assert_eq!(call(&p, "getpid", [0; 6]), RET_KILL_PROCESS);
    assert_eq!(call(&p, "read", [0; 6]), RET_ALLOW);
}

#[test]
fn load_profile_reads_docker_and_oci_files_and_reports_errors() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("p.json");
    std::fs::write(
        &f,
        r#"{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":13,
        "syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW"},
        {"names":["mount"],"action":"SCMP_ACT_ALLOW","includes":{"caps":["CAP_SYS_ADMIN"]}}]}"#,
    )
    .unwrap();
    let prof = load_profile(&f, &default_caps()).unwrap().unwrap();
    assert_eq!(prof.syscalls().as_ref().unwrap().len(), 1);
    let p = compile(&prof).unwrap();
    assert_eq!(call(&p, "write", [0; 6]), RET_ERRNO | 13);

    std::fs::write(&f, "{}").unwrap();
    assert!(load_profile(&f, &default_caps()).unwrap().is_none());

    std::fs::write(&f, "{not json").unwrap();
    let e = load_profile(&f, &default_caps()).unwrap_err().to_string();
    assert!(e.contains("p.json") && e.contains("seccomp profile"), "{e}");

    let e = load_profile(&dir.path().join("missing.json"), &default_caps()).unwrap_err();
    assert!(e.to_string().contains("missing.json"), "{e}");

    std::fs::write(&f, r#"{"defaultAction":"SCMP_ACT_NOTIFY"}"#).unwrap();
    assert!(load_profile(&f, &default_caps()).is_err());
}

#[test]
fn bytes_round_trip_and_reject_garbage() {
    let p = default_prog();
    assert_eq!(BpfProgram::from_bytes(&p.to_bytes()).unwrap(), p);
    assert!(BpfProgram::from_bytes(&[1, 2, 3]).is_err());
    assert!(BpfProgram::from_bytes(&[]).is_err());
}

#[test]
fn cache_stores_loads_and_repairs() {
    let dir = tempfile::tempdir().unwrap();
    let cache_dir = dir.path().join("seccomp");
    let prof = default_profile_for(&default_caps(), (6, 18)).unwrap();

    let t = std::time::Instant::now();
    let compiled = compile(&prof).unwrap();
    let compile_time = t.elapsed();

    let first = cached_program(&prof, &cache_dir).unwrap();
    assert_eq!(first, compiled);
    let key = cache::cache_key(&prof).unwrap();
    let file = cache_dir.join(format!("{key}.bpf"));
    assert_eq!(
        std::fs::metadata(&file).unwrap().len() as usize,
        40 + compiled.len() * 8
    );

    let t = std::time::Instant::now();
    let again = cached_program(&prof, &cache_dir).unwrap();
    let load_time = t.elapsed();
    assert_eq!(again, compiled);
    eprintln!(
        "seccomp default profile: {} insns, compile {:?}, cached load {:?}",
        compiled.len(),
        compile_time,
        load_time
    );

    // A torn or tampered entry is detected and replaced.
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    assert_eq!(cached_program(&prof, &cache_dir).unwrap(), compiled);
    assert_ne!(std::fs::read(&file).unwrap(), bytes);

    // No temporary files are left behind.
    let names: Vec<_> = std::fs::read_dir(&cache_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");

    // A different profile gets a different key.
    let mut caps = default_caps();
    caps.insert(Capability::SysAdmin);
    let other = default_profile_for(&caps, (6, 18)).unwrap();
    assert_ne!(cache::cache_key(&other).unwrap(), key);
}

#[test]
fn filter_flags_map_to_kernel_bits() {
    let prof = profile_from(
        r#"{"defaultAction":"SCMP_ACT_ALLOW","flags":["SECCOMP_FILTER_FLAG_LOG","SECCOMP_FILTER_FLAG_SPEC_ALLOW"]}"#,
    );
    assert_eq!(filter_flags(&prof), 2 | 4);
    assert_eq!(
        filter_flags(&default_profile_for(&default_caps(), (6, 18)).unwrap()),
        0
    );
}

#[test]
fn kernel_versions_parse() {
    assert_eq!(parse_kernel_version("6.18.44-fc-v669"), Some((6, 18)));
    assert_eq!(parse_kernel_version("4.8"), Some((4, 8)));
    assert_eq!(parse_kernel_version("5"), Some((5, 0)));
    assert_eq!(parse_kernel_version("x"), None);
}
