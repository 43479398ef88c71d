#!/usr/bin/env bash
# Prepares everything `cargo bench` compares runbox against: installs the
# peers from Debian, starts dockerd, and builds the SAME image content for
# every tool under one bench dir (default /var/tmp/runbox-bench, override
# with RUNBOX_BENCH_DIR or the first argument). Idempotent: whatever exists
# is kept; delete a file or directory to rebuild it.
#
# Layout (all paths below $dir):
#   busybox/rootfs/         busybox rootfs (static /bin/busybox + applet links)
#   busybox/rootfs.tar      the same as a rootfs tarball (what `docker import` got)
#   busybox/bundle/         OCI runtime bundle for runc/crun: config.json -> ../rootfs, args /bin/true
#   busybox-docker.tar      `docker save runbox-bench/busybox:latest` (Engine 20.10 legacy layout)
#   busybox-oci/            skopeo OCI layout, gzip layers, tag latest
#   busybox/layer.tar       the image's layer as docker stores it (for tar -xf)
#   busybox/layer.tar.gz    the OCI layout's gzip layer blob (for tar -xzf)
#   debian/rootfs/          Debian bookworm minbase (debootstrap), or host /usr fallback
#   debian/rootfs.tar, debian-docker.tar, debian-oci/, debian/layer.tar, debian/layer.tar.gz: as above
#   debian/SOURCE           "debootstrap MIRROR" or "host-usr-fallback"
#   env                     shell-sourceable facts for the benches (versions, paths)
set -euo pipefail

dir=${1:-${RUNBOX_BENCH_DIR:-/var/tmp/runbox-bench}}
log() { echo "bench-setup: $*" >&2; }
mkdir -p "$dir"

# --- peers ---------------------------------------------------------------------
pkgs=(docker.io runc crun bubblewrap umoci skopeo debootstrap busybox-static hyperfine zstd jq util-linux)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

# The docker 28 client in /usr/local/bin negotiates down to Engine 20.10's API.
if ! docker info >/dev/null 2>&1; then
  log "starting dockerd (log: /var/log/dockerd.log)"
  dockerd >/var/log/dockerd.log 2>&1 &
  for _ in $(seq 1 150); do
    docker info >/dev/null 2>&1 && break
    sleep 0.2
  done
  docker info >/dev/null 2>&1 || { log "dockerd did not start; see /var/log/dockerd.log"; exit 1; }
fi

# Deterministic tarball of a rootfs dir (same bytes every run for the same tree).
make_tar() { tar --sort=name --numeric-owner --xattrs -C "$1" -cf "$2.tmp" . && mv "$2.tmp" "$2"; }

# docker import + save + OCI layout + the single layer as tar and tar.gz
make_images() {
  local name=$1 sub=$dir/$1 img=runbox-bench/$1:latest
  [[ -f $sub/rootfs.tar ]] || { log "$name: rootfs.tar"; make_tar "$sub/rootfs" "$sub/rootfs.tar"; }
  if ! docker image inspect "$img" >/dev/null 2>&1; then
    if [[ -f $dir/$name-docker.tar ]]; then
      log "$name: docker load (image missing from dockerd)"
      docker load -q -i "$dir/$name-docker.tar" >/dev/null
    else
      log "$name: docker import"
      docker import --change 'CMD ["/bin/sh"]' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        "$sub/rootfs.tar" "$img" >/dev/null
    fi
  fi
  if [[ ! -f $dir/$name-docker.tar ]]; then
    log "$name: docker save"
    docker save -o "$dir/$name-docker.tar.tmp" "$img"
    mv "$dir/$name-docker.tar.tmp" "$dir/$name-docker.tar"
  fi
  if [[ ! -f $dir/$name-oci/index.json ]]; then
    log "$name: skopeo copy to OCI layout (gzip)"
    rm -rf "$dir/$name-oci.tmp"
    skopeo copy -q "docker-archive:$dir/$name-docker.tar" "oci:$dir/$name-oci.tmp:latest"
    mv "$dir/$name-oci.tmp" "$dir/$name-oci"
  fi
  if [[ ! -f $sub/layer.tar ]]; then
    local layer
    layer=$(tar -xOf "$dir/$name-docker.tar" manifest.json | jq -r '.[0].Layers[0]')
    tar -xOf "$dir/$name-docker.tar" "$layer" >"$sub/layer.tar.tmp"
    mv "$sub/layer.tar.tmp" "$sub/layer.tar"
  fi
  if [[ ! -f $sub/layer.tar.gz ]]; then
    local manifest blob
    manifest=$(jq -r '.manifests[0].digest' "$dir/$name-oci/index.json")
    blob=$(jq -r '.layers[0].digest' "$dir/$name-oci/blobs/sha256/${manifest#sha256:}")
    cp "$dir/$name-oci/blobs/sha256/${blob#sha256:}" "$sub/layer.tar.gz"
  fi
}

# --- busybox -----------------------------------------------------------------
bb=$dir/busybox
if [[ ! -x $bb/rootfs/bin/busybox ]]; then
  log "busybox: rootfs"
  rm -rf "$bb/rootfs.tmp"
  mkdir -p "$bb/rootfs.tmp"/{bin,etc,tmp,root,proc,sys,dev,run,var/tmp}
  cp /bin/busybox "$bb/rootfs.tmp/bin/busybox"
  for a in $(/bin/busybox --list); do
    [[ $a == busybox ]] || ln -sf busybox "$bb/rootfs.tmp/bin/$a"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$bb/rootfs.tmp/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$bb/rootfs.tmp/etc/group"
  chmod 1777 "$bb/rootfs.tmp/tmp" "$bb/rootfs.tmp/var/tmp"
  mv "$bb/rootfs.tmp" "$bb/rootfs"
fi
make_images busybox

# OCI runtime bundle for runc and crun: `runc spec` defaults (the same
# namespaces, mounts, masked paths and caps for both), adjusted.
if [[ ! -f $bb/bundle/config.json ]]; then
  log "busybox: OCI bundle (runc spec)"
  rm -rf "$bb/bundle.tmp" && mkdir -p "$bb/bundle.tmp"
  (cd "$bb/bundle.tmp" && runc spec)
  jq --arg root "$bb/rootfs" '
      .root = {path: $root, readonly: true}
    | .process.args = ["/bin/true"]
    | .process.terminal = false
    | .hostname = "runbox-bench"' "$bb/bundle.tmp/config.json" >"$bb/bundle.tmp/config.json.new"
  mv "$bb/bundle.tmp/config.json.new" "$bb/bundle.tmp/config.json"
  mv "$bb/bundle.tmp" "$bb/bundle"
fi
# A second bundle whose process stays up, for the exec benchmarks.
if [[ ! -f $bb/bundle-sleep/config.json ]]; then
  mkdir -p "$bb/bundle-sleep.tmp"
  jq '.process.args = ["/bin/sleep", "100000"]' "$bb/bundle/config.json" >"$bb/bundle-sleep.tmp/config.json"
  mv "$bb/bundle-sleep.tmp" "$bb/bundle-sleep"
fi

# --- debian bookworm minbase -------------------------------------------------
deb=$dir/debian
mkdir -p "$deb"
mirror_from_apt() {
  # The first http(s) URI apt uses for the "debian" archive (deb822 or one-line).
  grep -rhoE '(URIs:|^deb)[[:space:]]+(\[[^]]*\][[:space:]]+)?https?://[^[:space:]]+' \
      /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
    grep -oE 'https?://[^[:space:]]+' | grep -E '/debian/?$' | head -n1
}
if [[ ! -f $deb/SOURCE ]]; then
  mirror=$(mirror_from_apt || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  rm -rf "$deb/rootfs" "$deb/rootfs.debootstrap"
  log "debian: debootstrap --variant=minbase bookworm from $mirror (takes a few minutes)"
  if debootstrap --variant=minbase bookworm "$deb/rootfs.debootstrap" "$mirror" >"$deb/debootstrap.log" 2>&1; then
    # apt caches are not part of an image
    rm -rf "$deb/rootfs.debootstrap/var/cache/apt/archives/"*.deb "$deb/rootfs.debootstrap/var/lib/apt/lists/"*
    mv "$deb/rootfs.debootstrap" "$deb/rootfs"
    echo "debootstrap $mirror" >"$deb/SOURCE"
  else
    log "WARNING: debootstrap could not build bookworm from $mirror (see $deb/debootstrap.log)."
    log "WARNING: falling back to a large rootfs copied from the host's /usr: the 'debian' numbers are NOT a Debian minbase."
    rm -rf "$deb/rootfs.debootstrap"
    mkdir -p "$deb/rootfs.tmp"/{etc,tmp,root,proc,sys,dev,run,var/tmp}
    cp -a /usr "$deb/rootfs.tmp/usr"
    for l in bin sbin lib lib64; do [[ -e /usr/$l ]] && ln -s "usr/$l" "$deb/rootfs.tmp/$l"; done
    cp /etc/passwd /etc/group "$deb/rootfs.tmp/etc/"
    chmod 1777 "$deb/rootfs.tmp/tmp"
    mv "$deb/rootfs.tmp" "$deb/rootfs"
    echo "host-usr-fallback" >"$deb/SOURCE"
  fi
fi
make_images debian

# --- facts for the benches ---------------------------------------------------
{
  echo "RUNBOX_BENCH_DIR=$dir"
  echo "DEBIAN_SOURCE='$(cat "$deb/SOURCE")'"
  echo "DOCKER_ENGINE='$(docker version --format '{{.Server.Version}}')'"
  echo "RUNC_VERSION='$(runc --version | head -n1)'"
  echo "CRUN_VERSION='$(crun --version | head -n1)'"
  echo "BWRAP_VERSION='$(bwrap --version)'"
  echo "DEBIAN_ROOTFS_BYTES=$(du -sb "$deb/rootfs" | cut -f1)"
  echo "DEBIAN_ROOTFS_FILES=$(find "$deb/rootfs" | wc -l)"
} >"$dir/env"

log "ready in $dir:"
cat "$dir/env" >&2
du -sh "$dir"/* 2>/dev/null >&2
