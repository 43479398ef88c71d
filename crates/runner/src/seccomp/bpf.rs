//! Compiles an OCI [`LinuxSeccomp`] into a classic BPF program for x86_64,
//! without libseccomp. The program's shape:
//!
//! ```text
//! ld arch            ; foreign architecture (i386, x32 ABI...) -> KILL_PROCESS
//! jeq AUDIT_ARCH_X86_64
//! ld nr
//! binary search over the syscall-number line, cut into intervals that share
//! one outcome: the default action, KILL_PROCESS for x32 numbers
//! (0x40000000..0xffffffff; nr -1 keeps the default action, as libseccomp),
//! a shared `ret` for unconditional rules, or an inline body of argument
//! checks for rules with conditions
//! ```
//!
//! Conditional jumps only ever skip one instruction; every real jump is a
//! `ja` (32-bit offset), so program size never hits the 8-bit jt/jf limit.
//! Argument checks compare all 64 bits (high word, then low word), like
//! libseccomp. Rules for one syscall are tried in profile order, conditional
//! ones first, then the first unconditional one, then the default action.
//! When one rule repeats an argument index, each of its conditions becomes a
//! separate rule (OR), as runc does; otherwise its conditions are ANDed.

use std::collections::BTreeMap;

use oci_spec::runtime::{LinuxSeccomp, LinuxSeccompAction, LinuxSeccompOperator};

use super::syscalls;
use crate::error::{Error, Result};

/// Largest program the kernel accepts (BPF_MAXINSNS).
pub const MAX_INSNS: usize = 4096;

const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const X32_SYSCALL_BIT: u64 = 0x4000_0000;

pub(super) const RET_KILL_THREAD: u32 = 0x0000_0000;
pub(super) const RET_KILL_PROCESS: u32 = 0x8000_0000;
pub(super) const RET_TRAP: u32 = 0x0003_0000;
pub(super) const RET_ERRNO: u32 = 0x0005_0000;
pub(super) const RET_TRACE: u32 = 0x7ff0_0000;
pub(super) const RET_LOG: u32 = 0x7ffc_0000;
pub(super) const RET_ALLOW: u32 = 0x7fff_0000;

// Classic BPF opcodes (linux/bpf_common.h).
pub(super) const LD_W_ABS: u16 = 0x20;
pub(super) const JMP_JA: u16 = 0x05;
pub(super) const JMP_JEQ_K: u16 = 0x15;
pub(super) const JMP_JGT_K: u16 = 0x25;
pub(super) const JMP_JGE_K: u16 = 0x35;
pub(super) const ALU_AND_K: u16 = 0x54;
pub(super) const RET_K: u16 = 0x06;

// Offsets in struct seccomp_data.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const fn off_arg_lo(i: usize) -> u32 {
    16 + 8 * i as u32
}
const fn off_arg_hi(i: usize) -> u32 {
    20 + 8 * i as u32
}

/// One argument condition, normalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cond {
    index: usize,
    op: LinuxSeccompOperator,
    value: u64,
    value_two: u64,
}

/// A rule of one syscall: all conditions must hold (empty = unconditional).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    conds: Vec<Cond>,
    ret: u32,
}

/// The outcome of an interval of syscall numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Ret(u32),
    Body(Vec<Rule>),
}

/// Converts an action to the kernel's SECCOMP_RET_* value.
fn action_ret(action: LinuxSeccompAction, errno: Option<u32>) -> Result<u32> {
    // EPERM when no errno is given, as runc does.
    let data = errno.unwrap_or(libc::EPERM as u32) & 0xffff;
    Ok(match action {
        LinuxSeccompAction::ScmpActKill | LinuxSeccompAction::ScmpActKillThread => RET_KILL_THREAD,
        LinuxSeccompAction::ScmpActKillProcess => RET_KILL_PROCESS,
        LinuxSeccompAction::ScmpActTrap => RET_TRAP,
        LinuxSeccompAction::ScmpActErrno => RET_ERRNO | data,
        LinuxSeccompAction::ScmpActTrace => RET_TRACE | data,
        LinuxSeccompAction::ScmpActLog => RET_LOG,
        LinuxSeccompAction::ScmpActAllow => RET_ALLOW,
        LinuxSeccompAction::ScmpActNotify => {
            return Err(Error::Seccomp(
                "SCMP_ACT_NOTIFY (seccomp agents) is not supported".into(),
            ))
        }
    })
}

/// Collects the rules per syscall number. Unknown names are skipped, as
/// runc and libseccomp do for calls the architecture lacks.
fn rules_by_nr(profile: &LinuxSeccomp) -> Result<BTreeMap<u32, Vec<Rule>>> {
    let mut map: BTreeMap<u32, Vec<Rule>> = BTreeMap::new();
    for sc in profile.syscalls().iter().flatten() {
        let ret = action_ret(sc.action(), sc.errno_ret())?;
        let mut conds = Vec::new();
        for a in sc.args().iter().flatten() {
            if a.index() > 5 {
                return Err(Error::Seccomp(format!(
                    "argument index {} out of range 0-5",
                    a.index()
                )));
            }
            conds.push(Cond {
                index: a.index(),
                op: a.op(),
                value: a.value(),
                value_two: a.value_two().unwrap_or(0),
            });
        }
        let repeated = conds
            .iter()
            .enumerate()
            .any(|(i, c)| conds[..i].iter().any(|d| d.index == c.index));
        let rules: Vec<Rule> = if repeated {
            conds
                .iter()
                .map(|c| Rule {
                    conds: vec![*c],
                    ret,
                })
                .collect()
        } else {
            vec![Rule { conds, ret }]
        };
        for name in sc.names() {
            if let Some(nr) = syscalls::number(name) {
                map.entry(nr).or_default().extend(rules.iter().cloned());
            }
        }
    }
    Ok(map)
}

/// Orders a syscall's rules (conditional first, then the first
/// unconditional) and reduces it to a plain `ret` when it can.
fn outcome(rules: Vec<Rule>, default_ret: u32) -> Outcome {
    let fallback = rules
        .iter()
        .find(|r| r.conds.is_empty())
        .map_or(default_ret, |r| r.ret);
    let mut body: Vec<Rule> = rules
        .into_iter()
        .filter(|r| !r.conds.is_empty() && r.ret != fallback)
        .collect();
    if body.is_empty() {
        return Outcome::Ret(fallback);
    }
    body.push(Rule {
        conds: Vec::new(),
        ret: fallback,
    });
    Outcome::Body(body)
}

/// `[start, end)` intervals of the 32-bit syscall-number line.
fn intervals(map: BTreeMap<u32, Vec<Rule>>, default_ret: u32) -> Vec<(u64, u64, Outcome)> {
    let mut points: Vec<(u64, u64, Outcome)> = map
        .into_iter()
        .filter(|(nr, _)| u64::from(*nr) < X32_SYSCALL_BIT)
        .map(|(nr, rules)| {
            (
                u64::from(nr),
                u64::from(nr) + 1,
                outcome(rules, default_ret),
            )
        })
        .collect();
    points.push((X32_SYSCALL_BIT, 0xffff_ffff, Outcome::Ret(RET_KILL_PROCESS)));
    points.push((0xffff_ffff, 1 << 32, Outcome::Ret(default_ret)));

    let mut out: Vec<(u64, u64, Outcome)> = Vec::new();
    let mut next = 0u64;
    for (start, end, o) in points {
        if start > next {
            push_merged(&mut out, next, start, Outcome::Ret(default_ret));
        }
        push_merged(&mut out, start, end, o);
        next = end;
    }
    out
}

fn push_merged(out: &mut Vec<(u64, u64, Outcome)>, start: u64, end: u64, o: Outcome) {
    if let Some(last) = out.last_mut() {
        if last.1 == start && last.2 == o && matches!(o, Outcome::Ret(_)) {
            last.1 = end;
            return;
        }
    }
    out.push((start, end, o));
}

/// A tiny assembler: forward `ja` to labels, fixed up at the end.
#[derive(Default)]
struct Asm {
    insns: Vec<libc::sock_filter>,
    /// (instruction index of a `ja`, label)
    fixups: Vec<(usize, usize)>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn op(&mut self, code: u16, jt: u8, jf: u8, k: u32) {
        self.insns.push(libc::sock_filter { code, jt, jf, k });
    }
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }
    fn bind(&mut self, label: usize) {
        self.labels[label] = Some(self.insns.len());
    }
    fn ja(&mut self, label: usize) {
        self.fixups.push((self.insns.len(), label));
        self.op(JMP_JA, 0, 0, 0);
    }
    /// `if (A <jop> k) goto label`.
    fn jump_if(&mut self, jop: u16, k: u32, label: usize) {
        self.op(jop, 0, 1, k);
        self.ja(label);
    }
    /// `if !(A <jop> k) goto label`.
    fn jump_unless(&mut self, jop: u16, k: u32, label: usize) {
        self.op(jop, 1, 0, k);
        self.ja(label);
    }
    fn ret(&mut self, k: u32) {
        self.op(RET_K, 0, 0, k);
    }
    fn finish(mut self) -> Result<Vec<libc::sock_filter>> {
        for (at, label) in self.fixups {
            let target = self.labels[label]
                .ok_or_else(|| Error::Seccomp("internal: unbound BPF label".into()))?;
            // All jumps are forward by construction.
            self.insns[at].k = (target - at - 1) as u32;
        }
        if self.insns.len() > MAX_INSNS {
            return Err(Error::Seccomp(format!(
                "profile compiles to {} BPF instructions, more than the kernel's limit of {MAX_INSNS}",
                self.insns.len()
            )));
        }
        Ok(self.insns)
    }
}

fn emit_cond(asm: &mut Asm, c: &Cond, fail: usize) {
    let (hi, lo) = ((c.value >> 32) as u32, c.value as u32);
    let (ld_hi, ld_lo) = (off_arg_hi(c.index), off_arg_lo(c.index));
    let pass = asm.label();
    match c.op {
        LinuxSeccompOperator::ScmpCmpEq => {
            asm.op(LD_W_ABS, 0, 0, ld_hi);
            asm.jump_unless(JMP_JEQ_K, hi, fail);
            asm.op(LD_W_ABS, 0, 0, ld_lo);
            asm.jump_unless(JMP_JEQ_K, lo, fail);
        }
        LinuxSeccompOperator::ScmpCmpNe => {
            asm.op(LD_W_ABS, 0, 0, ld_hi);
            asm.jump_unless(JMP_JEQ_K, hi, pass);
            asm.op(LD_W_ABS, 0, 0, ld_lo);
            asm.jump_if(JMP_JEQ_K, lo, fail);
        }
        LinuxSeccompOperator::ScmpCmpMaskedEq => {
            // value is the mask, valueTwo the expected result (libseccomp).
            let (want_hi, want_lo) = ((c.value_two >> 32) as u32, c.value_two as u32);
            asm.op(LD_W_ABS, 0, 0, ld_hi);
            asm.op(ALU_AND_K, 0, 0, hi);
            asm.jump_unless(JMP_JEQ_K, want_hi, fail);
            asm.op(LD_W_ABS, 0, 0, ld_lo);
            asm.op(ALU_AND_K, 0, 0, lo);
            asm.jump_unless(JMP_JEQ_K, want_lo, fail);
        }
        LinuxSeccompOperator::ScmpCmpGt | LinuxSeccompOperator::ScmpCmpGe => {
            let lo_op = if c.op == LinuxSeccompOperator::ScmpCmpGt {
                JMP_JGT_K
            } else {
                JMP_JGE_K
            };
            asm.op(LD_W_ABS, 0, 0, ld_hi);
            asm.jump_if(JMP_JGT_K, hi, pass);
            asm.jump_unless(JMP_JEQ_K, hi, fail);
            asm.op(LD_W_ABS, 0, 0, ld_lo);
            asm.jump_unless(lo_op, lo, fail);
        }
        LinuxSeccompOperator::ScmpCmpLt | LinuxSeccompOperator::ScmpCmpLe => {
            // a < v is !(a >= v); a <= v is !(a > v).
            let lo_op = if c.op == LinuxSeccompOperator::ScmpCmpLt {
                JMP_JGE_K
            } else {
                JMP_JGT_K
            };
            asm.op(LD_W_ABS, 0, 0, ld_hi);
            asm.jump_if(JMP_JGT_K, hi, fail);
            asm.jump_unless(JMP_JEQ_K, hi, pass);
            asm.op(LD_W_ABS, 0, 0, ld_lo);
            asm.jump_if(lo_op, lo, fail);
        }
    }
    asm.bind(pass);
}

fn emit_outcome(asm: &mut Asm, o: &Outcome) {
    match o {
        Outcome::Ret(k) => asm.ret(*k),
        Outcome::Body(rules) => {
            for rule in rules {
                if rule.conds.is_empty() {
                    asm.ret(rule.ret);
                    // The unconditional rule ends the body.
                    return;
                }
                let fail = asm.label();
                for c in &rule.conds {
                    emit_cond(asm, c, fail);
                }
                asm.ret(rule.ret);
                asm.bind(fail);
            }
        }
    }
}

/// Binary search over intervals; A holds the syscall number throughout the
/// search (bodies reload A, but they only end in `ret`).
fn emit_tree(asm: &mut Asm, iv: &[(u64, u64, Outcome)]) {
    if let [(_, _, o)] = iv {
        emit_outcome(asm, o);
        return;
    }
    let mid = iv.len() / 2;
    let right = asm.label();
    // iv[mid].0 < 2^32 since only the last interval can end at 2^32.
    asm.jump_if(JMP_JGE_K, iv[mid].0 as u32, right);
    emit_tree(asm, &iv[..mid]);
    asm.bind(right);
    emit_tree(asm, &iv[mid..]);
}

/// Compiles `profile` to BPF instructions for x86_64.
pub(super) fn compile_insns(profile: &LinuxSeccomp) -> Result<Vec<libc::sock_filter>> {
    let default_ret = action_ret(profile.default_action(), profile.default_errno_ret())?;
    let map = rules_by_nr(profile)?;
    let iv = intervals(map, default_ret);

    let mut asm = Asm::default();
    asm.op(LD_W_ABS, 0, 0, OFF_ARCH);
    asm.op(JMP_JEQ_K, 1, 0, AUDIT_ARCH_X86_64);
    asm.ret(RET_KILL_PROCESS);
    asm.op(LD_W_ABS, 0, 0, OFF_NR);
    emit_tree(&mut asm, &iv);
    asm.finish()
}

/// A test-only interpreter of classic seccomp BPF over `seccomp_data`, so
/// that compiled programs can be checked without installing them.
#[cfg(test)]
pub(crate) mod interp {
    use super::*;

    pub(crate) const ARCH_X86_64: u32 = AUDIT_ARCH_X86_64;

    /// Runs `prog` on (nr, arch, args) and returns the SECCOMP_RET_* value.
    pub(crate) fn run(prog: &[libc::sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        let mut a: u32 = 0;
        let mut pc = 0usize;
        for _ in 0..prog.len() + 1 {
            let ins = prog[pc];
            pc += 1;
            match ins.code {
                LD_W_ABS => {
                    let k = ins.k as usize;
                    a = u32::from_le_bytes(data[k..k + 4].try_into().unwrap());
                }
                ALU_AND_K => a &= ins.k,
                JMP_JA => pc += ins.k as usize,
                JMP_JEQ_K | JMP_JGT_K | JMP_JGE_K => {
                    let t = match ins.code {
                        JMP_JEQ_K => a == ins.k,
                        JMP_JGT_K => a > ins.k,
                        _ => a >= ins.k,
                    };
                    pc += usize::from(if t { ins.jt } else { ins.jf });
                }
                RET_K => return ins.k,
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
        panic!("program did not return (loop or fell off the end)");
    }
}
