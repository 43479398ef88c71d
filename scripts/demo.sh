#!/usr/bin/env bash
# The main job on a fresh machine: install what runbox needs, build it, make a
# small image tarball from the host's busybox-static, load it and run a
# command in a container from it.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v busybox >/dev/null || ! dpkg -s libseccomp-dev >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq busybox-static libseccomp-dev pkg-config >/dev/null
fi
cargo build --release
# .cargo/config.toml builds for this target (a static runbox).
RUNBOX=${CARGO_TARGET_DIR:-$PWD/target}/${CARGO_BUILD_TARGET:-x86_64-unknown-linux-gnu}/release/runbox

work=$(mktemp -d /var/tmp/runbox-demo.XXXXXX)
# runbox's background deleter may still be leaving a spare layer in the store: retry.
trap 'for _ in 1 2 3 4 5; do rm -rf "$work" 2>/dev/null && break; sleep 0.1; done' EXIT
# A plain rootfs tarball, as `docker export` writes one.
mkdir -p "$work/rootfs/bin" "$work/rootfs/etc"
cp "$(command -v busybox)" "$work/rootfs/bin/busybox"
for applet in sh true echo cat ls id env uname; do ln -s busybox "$work/rootfs/bin/$applet"; done
echo 'root:x:0:0:root:/root:/bin/sh' >"$work/rootfs/etc/passwd"
echo 'root:x:0:' >"$work/rootfs/etc/group"
tar -C "$work/rootfs" -cf "$work/busybox.tar" .

store=(--root "$work/store" --state "$work/state")
id=$("$RUNBOX" "${store[@]}" load --tag demo:latest "$work/busybox.tar")
"$RUNBOX" "${store[@]}" inspect demo >"$work/inspect.json"
grep -E '"(id|rootfs|size|files)"' "$work/inspect.json"
"$RUNBOX" "${store[@]}" run --timings "$work/busybox.tar" sh -c 'echo "hello from $(uname -n) as $(id -un), image '"${id:7:12}"'"'
