#!/usr/bin/env bash
# Builds the small REAL test images in tests/data/ with real tools (docker
# Engine 20.10 `docker save`, skopeo, zstd) and writes tests/data/README.md
# and tests/data/expected.json describing them, so tests can assert exact
# facts (image IDs, layer counts, file contents).
#
# Usage: bash scripts/make-test-images.sh [--force]
#   Without --force it does nothing when every output already exists (the
#   committed files are the reference; rebuilding changes the image IDs
#   because `docker import` stamps the creation time).
#
# Needs root (dockerd). Installs docker.io, skopeo, busybox-static, zstd, jq
# via apt-get when missing. No registry is needed: the base comes from
# `docker import` of a busybox rootfs, builds run with `--network none`.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
out="$here/tests/data"
force=0
[[ "${1:-}" == "--force" ]] && force=1

outputs=(busybox-multi.tar busybox-two-images.tar busybox-oci-gzip busybox-oci-gzip.tar
         busybox-oci-plain busybox-rootfs.tar busybox-multi.tar.zst README.md expected.json)
if [[ $force == 0 ]]; then
  missing=0
  for f in "${outputs[@]}"; do [[ -e "$out/$f" ]] || missing=1; done
  if [[ $missing == 0 ]]; then
    echo "tests/data is complete; pass --force to rebuild (changes image IDs)"
    exit 0
  fi
fi

log() { echo "make-test-images: $*" >&2; }

# --- tools -------------------------------------------------------------------
need_pkgs=()
[[ -x /bin/busybox ]] || need_pkgs+=(busybox-static)
command -v dockerd >/dev/null || need_pkgs+=(docker.io)
command -v skopeo >/dev/null || need_pkgs+=(skopeo)
command -v zstd >/dev/null || need_pkgs+=(zstd)
command -v jq >/dev/null || need_pkgs+=(jq)
if ((${#need_pkgs[@]})); then
  log "installing ${need_pkgs[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_pkgs[@]}"
fi
if ! file -L /bin/busybox 2>/dev/null | grep -q 'statically linked'; then
  echo "make-test-images: /bin/busybox is not static; install busybox-static" >&2
  exit 1
fi

# The docker 28 client negotiates down to Engine 20.10's API by itself; the
# legacy builder is what Engine 20.10 offers without buildx.
export DOCKER_BUILDKIT=0
docker_cli=docker
command -v docker >/dev/null || docker_cli=/usr/bin/docker

if ! [[ -S /var/run/docker.sock ]] || ! $docker_cli info >/dev/null 2>&1; then
  log "starting dockerd (log: /var/log/dockerd.log)"
  dockerd >/var/log/dockerd.log 2>&1 &
  for _ in $(seq 1 100); do
    $docker_cli info >/dev/null 2>&1 && break
    sleep 0.2
  done
  $docker_cli info >/dev/null 2>&1 || { echo "dockerd did not start; see /var/log/dockerd.log" >&2; exit 1; }
fi
engine=$($docker_cli version --format '{{.Server.Version}}')
log "docker engine $engine"

work=$(mktemp -d /var/tmp/runbox-testimg.XXXXXX)
cleanup() {
  $docker_cli rm -f runbox-testimg-export >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# --- (a) busybox rootfs -> docker import -> docker build -----------------------
rootfs="$work/rootfs"
mkdir -p "$rootfs"/{bin,etc,tmp,root,proc,sys,dev,usr/share/runbox,var/empty}
cp /bin/busybox "$rootfs/bin/busybox"
applets=(sh ash ls cat echo true false env id mkdir rm rmdir sleep pwd touch test "[" stat
         readlink ln cp mv head tail wc grep sed hostname ps mount umount whoami uname chmod
         chown date printf kill find sort tr cut expr seq yes dd du df nproc xargs)
for a in "${applets[@]}"; do ln -s busybox "$rootfs/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\nuser:x:1000:1000:user:/tmp:/bin/sh\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\nuser:x:1000:\n' >"$rootfs/etc/group"
printf 'NAME="runbox test busybox"\nID=runbox-test\n' >"$rootfs/etc/os-release"
printf 'this file is deleted in layer 2\n' >"$rootfs/etc/removed-by-layer2"
printf 'base layer file\n' >"$rootfs/usr/share/runbox/base.txt"
ln "$rootfs/usr/share/runbox/base.txt" "$rootfs/usr/share/runbox/base-hardlink.txt"
printf 'owned by 1000:1000\n' >"$rootfs/usr/share/runbox/owned-by-user.txt"
chown 1000:1000 "$rootfs/usr/share/runbox/owned-by-user.txt"
printf '#!/bin/sh\necho setuid-script\n' >"$rootfs/usr/share/runbox/setuid.sh"
chmod 4755 "$rootfs/usr/share/runbox/setuid.sh"
chmod 1777 "$rootfs/tmp"
chmod 700 "$rootfs/root"
# Fixed order, times and numeric owners: the base layer's bytes (and diff ID)
# are the same on every run; only the import's creation time varies.
tar --sort=name --mtime='2024-01-01 00:00:00Z' --numeric-owner -C "$rootfs" -cf "$work/base-rootfs.tar" .

$docker_cli rmi -f runbox-test/busybox-multi:latest runbox-test/busybox-base:latest >/dev/null 2>&1 || true
$docker_cli import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/sh"]' \
  "$work/base-rootfs.tar" runbox-test/busybox-base:latest >/dev/null

mkdir -p "$work/ctx"
cat >"$work/ctx/Dockerfile" <<'EOF'
FROM runbox-test/busybox-base:latest
ENV GREETING="hello from runbox" RUNBOX_TEST=1
# layer 2: add a file, delete a base file (-> .wh.removed-by-layer2), fill /data
RUN echo 'added in layer 2' > /hello.txt \
 && rm /etc/removed-by-layer2 \
 && mkdir -p /data/sub \
 && echo 'old data' > /data/old.txt \
 && echo 'old sub' > /data/sub/old-sub.txt
# layer 3: delete /data and recreate it in the same step (-> /data/.wh..wh..opq)
RUN rm -rf /data \
 && mkdir /data \
 && echo 'new data' > /data/new.txt
# layers 4 and 5: byte-identical layers (same file, content and mtime), so
# the same diff ID twice; Engine 20.10's `docker save` writes the second
# one's layer.tar as a symlink to the first. (`RUN true` would give no layer.)
RUN echo same > /same.txt && touch -d '2024-01-01 00:00:00' /same.txt
RUN echo same > /same.txt && touch -d '2024-01-01 00:00:00' /same.txt
WORKDIR /data
ENTRYPOINT ["/bin/sh", "-c"]
CMD ["echo $GREETING"]
EOF
$docker_cli build -q --network none -t runbox-test/busybox-multi:latest "$work/ctx" >/dev/null

$docker_cli save -o "$work/busybox-multi.tar" runbox-test/busybox-multi:latest
$docker_cli save -o "$work/busybox-two-images.tar" runbox-test/busybox-base:latest runbox-test/busybox-multi:latest

# --- (b) OCI layouts via skopeo ------------------------------------------------
skopeo copy -q "docker-archive:$work/busybox-multi.tar" "oci:$work/busybox-oci-gzip:latest"
skopeo copy -q --dest-oci-accept-uncompressed-layers \
  "docker-archive:$work/busybox-multi.tar" "oci:$work/busybox-oci-plain:latest"
tar --sort=name --mtime='2024-01-01 00:00:00Z' --numeric-owner -C "$work/busybox-oci-gzip" -cf "$work/busybox-oci-gzip.tar" .

# --- (c) plain rootfs tar ------------------------------------------------------
$docker_cli rm -f runbox-testimg-export >/dev/null 2>&1 || true
$docker_cli create --name runbox-testimg-export runbox-test/busybox-multi:latest >/dev/null
$docker_cli export -o "$work/busybox-rootfs.tar" runbox-testimg-export
$docker_cli rm -f runbox-testimg-export >/dev/null

# --- (d) zstd of the whole docker archive -------------------------------------
zstd -q -19 -f "$work/busybox-multi.tar" -o "$work/busybox-multi.tar.zst"

# --- facts for tests -----------------------------------------------------------
multi_id=$($docker_cli image inspect --format '{{.Id}}' runbox-test/busybox-multi:latest)
base_id=$($docker_cli image inspect --format '{{.Id}}' runbox-test/busybox-base:latest)
multi_layers=$($docker_cli image inspect --format '{{len .RootFS.Layers}}' runbox-test/busybox-multi:latest)
base_layers=$($docker_cli image inspect --format '{{len .RootFS.Layers}}' runbox-test/busybox-base:latest)
multi_diffids=$($docker_cli image inspect --format '{{json .RootFS.Layers}}' runbox-test/busybox-multi:latest)
symlinks=$(tar -tvf "$work/busybox-multi.tar" | awk '$1 ~ /^l/ {print $6, $7, $8}')
two_symlinks=$(tar -tvf "$work/busybox-two-images.tar" | awk '$1 ~ /^l/ {print $6, $7, $8}')
# manifest.json order as dockerd wrote it (not the order of the arguments)
two_manifest=$(tar -xOf "$work/busybox-two-images.tar" manifest.json |
  jq -c '[.[] | {config: ("sha256:" + (.Config | rtrimstr(".json"))), tags: .RepoTags, layers: (.Layers | length)}]')
oci_gzip_manifest=$(jq -r '.manifests[0].digest' "$work/busybox-oci-gzip/index.json")
oci_plain_manifest=$(jq -r '.manifests[0].digest' "$work/busybox-oci-plain/index.json")
oci_gzip_config=$(jq -r '.config.digest' "$work/busybox-oci-gzip/blobs/sha256/${oci_gzip_manifest#sha256:}")
oci_plain_config=$(jq -r '.config.digest' "$work/busybox-oci-plain/blobs/sha256/${oci_plain_manifest#sha256:}")
oci_gzip_types=$(jq -c '[.layers[].mediaType]' "$work/busybox-oci-gzip/blobs/sha256/${oci_gzip_manifest#sha256:}")
oci_plain_types=$(jq -c '[.layers[].mediaType]' "$work/busybox-oci-plain/blobs/sha256/${oci_plain_manifest#sha256:}")
oci_plain_first=$(jq -r '.layers[0].digest' "$work/busybox-oci-plain/blobs/sha256/${oci_plain_manifest#sha256:}")
oci_plain_magic=$(head -c 4 "$work/busybox-oci-plain/blobs/sha256/${oci_plain_first#sha256:}" | od -An -tx1 | tr -d ' \n')
oci_gzip_first=$(jq -r '.layers[0].digest' "$work/busybox-oci-gzip/blobs/sha256/${oci_gzip_manifest#sha256:}")
oci_gzip_magic=$(head -c 4 "$work/busybox-oci-gzip/blobs/sha256/${oci_gzip_first#sha256:}" | od -An -tx1 | tr -d ' \n')
multi_env=$($docker_cli image inspect --format '{{json .Config.Env}}' runbox-test/busybox-multi:latest)
multi_ep=$($docker_cli image inspect --format '{{json .Config.Entrypoint}}' runbox-test/busybox-multi:latest)
multi_cmd=$($docker_cli image inspect --format '{{json .Config.Cmd}}' runbox-test/busybox-multi:latest)
multi_wd=$($docker_cli image inspect --format '{{json .Config.WorkingDir}}' runbox-test/busybox-multi:latest)
busybox_sha=$(sha256sum /bin/busybox | cut -d' ' -f1)
busybox_size=$(stat -c %s /bin/busybox)
multi_run_out=$($docker_cli run --rm --network none runbox-test/busybox-multi:latest)

# Outputs replace the old ones only once everything above succeeded.
mkdir -p "$out"
for f in busybox-multi.tar busybox-two-images.tar busybox-oci-gzip.tar busybox-rootfs.tar busybox-multi.tar.zst; do
  cp "$work/$f" "$out/$f"
  chmod 0644 "$out/$f"
done
for d in busybox-oci-gzip busybox-oci-plain; do
  rm -rf "$out/$d"
  cp -a "$work/$d" "$out/$d"
done

jq -n \
  --arg engine "$engine" \
  --arg multi_id "$multi_id" --arg base_id "$base_id" \
  --argjson multi_layers "$multi_layers" --argjson base_layers "$base_layers" \
  --argjson multi_diffids "$multi_diffids" \
  --arg oci_gzip_manifest "$oci_gzip_manifest" --arg oci_plain_manifest "$oci_plain_manifest" \
  --arg oci_gzip_config "$oci_gzip_config" --arg oci_plain_config "$oci_plain_config" \
  --argjson oci_gzip_types "$oci_gzip_types" --argjson oci_plain_types "$oci_plain_types" \
  --arg oci_gzip_magic "$oci_gzip_magic" --arg oci_plain_magic "$oci_plain_magic" \
  --argjson env "$multi_env" --argjson entrypoint "$multi_ep" --argjson cmd "$multi_cmd" \
  --argjson workdir "$multi_wd" --arg run_out "$multi_run_out" \
  --argjson two_manifest "$two_manifest" --arg busybox_sha "$busybox_sha" --argjson busybox_size "$busybox_size" \
  '{
    docker_engine: $engine,
    busybox_multi: {file: "busybox-multi.tar", name: "runbox-test/busybox-multi:latest",
      image_id: $multi_id, layers: $multi_layers, diff_ids: $multi_diffids,
      env: $env, entrypoint: $entrypoint, cmd: $cmd, workdir: $workdir,
      default_run_stdout: $run_out},
    busybox_base: {name: "runbox-test/busybox-base:latest", image_id: $base_id, layers: $base_layers},
    two_images: {file: "busybox-two-images.tar", image_ids: [$base_id, $multi_id], manifest: $two_manifest},
    oci_gzip: {dir: "busybox-oci-gzip", tar: "busybox-oci-gzip.tar", tag: "latest",
      manifest: $oci_gzip_manifest, config: $oci_gzip_config, image_id: $oci_gzip_config,
      layer_media_types: $oci_gzip_types, first_layer_magic: $oci_gzip_magic},
    oci_plain: {dir: "busybox-oci-plain", tag: "latest",
      manifest: $oci_plain_manifest, config: $oci_plain_config, image_id: $oci_plain_config,
      layer_media_types: $oci_plain_types, first_layer_magic: $oci_plain_magic},
    rootfs_tar: {file: "busybox-rootfs.tar"},
    zstd_archive: {file: "busybox-multi.tar.zst", of: "busybox-multi.tar"},
    files: {
      "bin/busybox": {sha256: $busybox_sha, size: $busybox_size, mode: "0755"},
      "bin/sh": {symlink: "busybox"},
      "hello.txt": {content: "added in layer 2\n"},
      "data/new.txt": {content: "new data\n"},
      "etc/os-release": {content: "NAME=\"runbox test busybox\"\nID=runbox-test\n"},
      "usr/share/runbox/base.txt": {content: "base layer file\n", hardlink_of: "usr/share/runbox/base-hardlink.txt"},
      "usr/share/runbox/base-hardlink.txt": {content: "base layer file\n"},
      "same.txt": {content: "same\n"},
      "usr/share/runbox/owned-by-user.txt": {content: "owned by 1000:1000\n", uid: 1000, gid: 1000},
      "usr/share/runbox/setuid.sh": {mode: "4755"},
      "tmp": {mode: "1777"},
      "root": {mode: "0700"}
    },
    absent: ["etc/removed-by-layer2", "data/old.txt", "data/sub"]
  }' >"$out/expected.json"

sizes=$(cd "$out" && du -sb busybox-multi.tar busybox-two-images.tar busybox-oci-gzip busybox-oci-gzip.tar \
          busybox-oci-plain busybox-rootfs.tar busybox-multi.tar.zst | awk '{printf "| `%s` | %d |\n", $2, $1}')

cat >"$out/README.md" <<EOF
# Test images

Small real images made by \`scripts/make-test-images.sh\` (docker Engine $engine \`docker save\`,
skopeo, zstd). Do not edit by hand: rerun \`bash scripts/make-test-images.sh --force\`, which rewrites
this file and \`expected.json\` (the same facts, machine-readable: tests should read that file rather than
hard-code IDs, since a rebuild changes them: \`docker import\` stamps the creation time).

## Sizes (bytes)

| file | size |
|---|---|
$sizes

## The images

The base is \`runbox-test/busybox-base:latest\`: \`docker import\` of a rootfs holding the static
\`/bin/busybox\` (Debian busybox-static, sha256 \`$busybox_sha\`, $busybox_size bytes) plus symlinks
\`bin/sh\`, \`bin/ls\`, ... -> \`busybox\`, \`etc/passwd\` (root, nobody, user 1000), \`etc/group\`,
\`etc/os-release\`, \`usr/share/runbox/base.txt\` with a hard link \`base-hardlink.txt\`,
\`owned-by-user.txt\` (uid/gid 1000), \`setuid.sh\` (mode 4755), \`tmp\` (1777), \`root\` (0700).
1 layer, image ID \`$base_id\`.

\`runbox-test/busybox-multi:latest\`, built FROM the base with \`docker build --network none\`:

| layer | made by | content |
|---|---|---|
| 1 | docker import | the base rootfs above |
| 2 | RUN | adds \`/hello.txt\` ("added in layer 2"), deletes \`/etc/removed-by-layer2\` (whiteout \`etc/.wh.removed-by-layer2\`), creates \`/data/old.txt\`, \`/data/sub/old-sub.txt\` |
| 3 | RUN | \`rm -rf /data && mkdir /data\` + \`/data/new.txt\` ("new data"): opaque dir \`data/.wh..wh..opq\` |
| 4 | RUN | \`/same.txt\` ("same", mtime fixed to 2024-01-01) |
| 5 | RUN | the same \`/same.txt\` again: byte-identical layer, same diff ID as 4, so its \`layer.tar\` in the docker archive is a symlink to layer 4's |

- Image ID \`$multi_id\`, $multi_layers layers, diff IDs \`$multi_diffids\`.
- Config: Env \`$multi_env\`, Entrypoint \`$multi_ep\`, Cmd \`$multi_cmd\`, WorkingDir \`$multi_wd\`, no User.
- \`docker run\` with the default command prints \`$multi_run_out\`.
- Layer 1 (from \`docker import\` of GNU tar output) names entries \`./bin/busybox\`, with \`./\` itself first, and
  stores \`usr/share/runbox/base.txt\` as a hard link (typeflag 1) to \`base-hardlink.txt\`; layers 2-5
  (written by dockerd) name entries without \`./\`. The whiteouts are \`etc/.wh.removed-by-layer2\` (layer 2,
  mode 0600) and \`data/.wh..wh..opq\` (layer 3). Layers 4 and 5 each hold only \`same.txt\` ("same", mtime 2024-01-01).
- Final tree: \`/hello.txt\` = "added in layer 2\\n", \`/data/new.txt\` = "new data\\n"; absent:
  \`/etc/removed-by-layer2\`, \`/data/old.txt\`, \`/data/sub\`.

## The files

- \`busybox-multi.tar\`: \`docker save runbox-test/busybox-multi:latest\`, Engine $engine legacy layout
  (manifest.json, repositories, \`<v1id>/layer.tar\`, \`<config>.json\`, uncompressed layers). Symlinks in it:
  \`$(echo "$symlinks" | tr '\n' ';')\`
- \`busybox-two-images.tar\`: \`docker save runbox-test/busybox-base:latest runbox-test/busybox-multi:latest\`:
  2 images sharing the base layer. manifest.json entries in file order: \`$two_manifest\`.
  The base layer's bytes are stored once; the second image's entry for it is a symlink, as are repeated
  layers: \`$(echo "$two_symlinks" | tr '\n' ';')\`
- \`busybox-oci-gzip/\` and \`busybox-oci-gzip.tar\` (a tar of that directory, entries \`./oci-layout\`,
  \`./index.json\`, \`./blobs/sha256/...\`): \`skopeo copy docker-archive:busybox-multi.tar
  oci:DIR:latest\`. Manifest \`$oci_gzip_manifest\`, config \`$oci_gzip_config\` (skopeo rewrites the
  config into OCI form, so this digest differs from the docker image ID), 5 layer descriptors (the last two
  the same blob, stored once), layer media types \`$oci_gzip_types\`, first layer starts \`$oci_gzip_magic\`.
- \`busybox-oci-plain/\`: the same with \`--dest-oci-accept-uncompressed-layers\`. Manifest
  \`$oci_plain_manifest\`, layer media types \`$oci_plain_types\`, first layer starts with bytes
  \`$oci_plain_magic\` (a plain tar: sniff the magic, do not trust the mediaType).
- \`busybox-rootfs.tar\`: \`docker export\` of a container of busybox-multi: one flattened rootfs tar (no
  whiteouts; docker adds \`.dockerenv\` and empty \`etc/hosts\`, \`etc/hostname\`, \`etc/resolv.conf\`, \`dev/\`, \`proc/\`, \`sys/\`).
- \`busybox-multi.tar.zst\`: \`zstd -19\` of \`busybox-multi.tar\` (a whole compressed archive, magic 28b52ffd).
EOF

log "done:"
(cd "$out" && du -sh busybox-* README.md expected.json) >&2
