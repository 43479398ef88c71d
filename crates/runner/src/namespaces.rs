//! Which namespaces a container gets: the OCI Spec's `linux.namespaces`
//! turned into clone(2) flags (pure). Joining an existing namespace by path
//! (setns) is not offered by `runbox run`; such a spec is rejected.

use nix::sched::CloneFlags;
use oci_spec::runtime::{LinuxNamespaceType, Spec};

use crate::error::{Error, Result};

/// The clone flags for the namespaces `spec` asks for.
pub fn clone_flags(spec: &Spec) -> Result<CloneFlags> {
    let mut flags = CloneFlags::empty();
    for ns in spec
        .linux()
        .as_ref()
        .and_then(|l| l.namespaces().as_ref())
        .into_iter()
        .flatten()
    {
        if let Some(path) = ns.path() {
            return Err(Error::InvalidOption {
                option: "namespace",
                value: path.display().to_string(),
                reason: "joining an existing namespace is not supported by run".into(),
            });
        }
        flags |= match ns.typ() {
            LinuxNamespaceType::Mount => CloneFlags::CLONE_NEWNS,
            LinuxNamespaceType::Pid => CloneFlags::CLONE_NEWPID,
            LinuxNamespaceType::Uts => CloneFlags::CLONE_NEWUTS,
            LinuxNamespaceType::Ipc => CloneFlags::CLONE_NEWIPC,
            LinuxNamespaceType::Network => CloneFlags::CLONE_NEWNET,
            LinuxNamespaceType::Cgroup => CloneFlags::CLONE_NEWCGROUP,
            LinuxNamespaceType::User => CloneFlags::CLONE_NEWUSER,
            LinuxNamespaceType::Time => {
                return Err(Error::InvalidOption {
                    option: "namespace",
                    value: "time".into(),
                    reason: "time namespaces are not supported".into(),
                })
            }
        };
    }
    // The whole design (mounts private to the container, cleanup by namespace
    // teardown) rests on a new mount namespace.
    if !flags.contains(CloneFlags::CLONE_NEWNS) {
        return Err(Error::InvalidOption {
            option: "namespace",
            value: "mount".into(),
            reason: "a container needs its own mount namespace".into(),
        });
    }
    if flags.contains(CloneFlags::CLONE_NEWUSER) {
        return Err(Error::InvalidOption {
            option: "namespace",
            value: "user".into(),
            reason: "user namespaces are not supported yet".into(),
        });
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::{LinuxBuilder, LinuxNamespaceBuilder, SpecBuilder};

    fn spec(types: &[LinuxNamespaceType], path: Option<&str>) -> Spec {
        let nss: Vec<_> = types
            .iter()
            .map(|t| {
                let mut b = LinuxNamespaceBuilder::default().typ(*t);
                if let Some(p) = path {
                    b = b.path(p);
                }
                b.build().unwrap()
            })
            .collect();
        SpecBuilder::default()
            .linux(LinuxBuilder::default().namespaces(nss).build().unwrap())
            .build()
            .unwrap()
    }

    #[test]
    fn maps_namespace_types_to_clone_flags() {
        use LinuxNamespaceType::*;
        let f = clone_flags(&spec(&[Mount, Pid, Uts, Ipc, Network], None)).unwrap();
        assert_eq!(
            f,
            CloneFlags::CLONE_NEWNS
                | CloneFlags::CLONE_NEWPID
                | CloneFlags::CLONE_NEWUTS
                | CloneFlags::CLONE_NEWIPC
                | CloneFlags::CLONE_NEWNET
        );
    }

    #[test]
    fn rejects_missing_mount_ns_paths_and_user_ns() {
        use LinuxNamespaceType::*;
        assert!(clone_flags(&spec(&[Pid], None)).is_err());
        assert!(clone_flags(&spec(&[Mount], Some("/proc/1/ns/mnt"))).is_err());
        assert!(clone_flags(&spec(&[Mount, User], None)).is_err());
    }
}
