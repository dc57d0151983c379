# shellcheck shell=bash
# Sourced by scripts/k8s-testbed: the real node's container images, built from local files because
# no image registry is reachable here, and imported into containerd's image store by `up`.
#
# * the Worker image rlark.test/worker:<key>: Debian bookworm from debootstrap (minbase) with the
#   packages in worker-image/packages (layer 1), a virtualenv /opt/venv with
#   worker-image/requirements.txt installed by the image's own pip (layer 2), and what
#   worker-image/from-machine.txt lists (torch, rlinf...) taken from this machine's RLark
#   environment, each file checked against its RECORD (layer 3, zstd); user rlark (1000);
# * the pause image rlark.test/pause:3.10.2: Kubernetes' own pause.c from the k8s.io/kubernetes
#   module, compiled static, alone in one layer.
#
# Each is an OCI image layout written here (blobs, manifest, index.json naming the image with
# containerd's io.containerd.image.name annotation) and packed as a tar `ctr images import` reads.
# Each is cached under $CACHE_ROOT/images by a hash of its inputs: the input files and this script
# (any change to either builds a new image; the Debian packages and wheels come from Debian's
# archive and PyPI at build time, so the same key may hold newer patch releases than an older
# build of the same inputs), and for layer 3 the RECORDs of the distributions it copies. Layers 1
# and 2 are cached apart (base-<key>, venv-<key>), so a new torch builds layer 3 alone.

IMAGE_CACHE=$CACHE_ROOT/images
IMAGE_SRC=$REPO/scripts/k8s-testbed.d/worker-image
IMAGE_SCRIPT=$REPO/scripts/k8s-testbed.d/image.sh
MACHINE_DISTS=$IMAGE_SRC/machine-dists.py
# the Python of RLark's environment, whose distributions layer 3 copies (scripts/setup-env makes it)
IMAGE_PYTHON=${RLARK_TESTBED_PYTHON:-$REPO/.venv/bin/python}
IMAGE_PYTHON_MINOR=3.11   # bookworm's python3
IMAGE_SITE=/opt/venv/lib/python$IMAGE_PYTHON_MINOR/site-packages
DEBIAN_SUITE=bookworm
IMAGE_REPO=rlark.test

sha256() { sha256sum | cut -d' ' -f1; }

# the Debian mirror: RLARK_TESTBED_DEBIAN_MIRROR, else the first one apt is configured with
debian_mirror() {
    local m=${RLARK_TESTBED_DEBIAN_MIRROR:-}
    if [ -z "$m" ]; then
        m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '$1 == "URIs:" { print $2 }' \
            | grep -v -- '-security' | head -n1)
        [ -n "$m" ] || m=$(awk '$1 == "deb" && $3 !~ /security/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null)
    fi
    printf '%s\n' "${m:-http://deb.debian.org/debian}"
}

image_packages() {  # the package names in worker-image/packages
    sed 's/#.*//' "$IMAGE_SRC/packages" | tr -s ' \t' '\n\n' | grep -v '^$' | sort -u
}

machine_dists_key() {  # the distributions layer 3 copies, with their RECORDs' hashes; fails naming why
    [ -x "$IMAGE_PYTHON" ] || { echo "no $IMAGE_PYTHON: run scripts/setup-env, or set RLARK_TESTBED_PYTHON" >&2; return 1; }
    "$IMAGE_PYTHON" "$MACHINE_DISTS" key "$IMAGE_SRC/from-machine.txt"
}

image_keys() {  # sets BASE_KEY, VENV_KEY, WORKER_KEY (empty, MACHINE_DISTS_ERROR set, when layer
    # 3's distributions cannot be read here), PAUSE_KEY, WORKER_IMAGE, PAUSE_IMAGE
    local script dists
    script=$(sha256 <"$IMAGE_SCRIPT")
    BASE_KEY=$({ echo "debian $DEBIAN_SUITE minbase"; image_packages; echo "$script"; } | sha256 | cut -c1-16)
    VENV_KEY=$({ echo "$BASE_KEY"; cat "$IMAGE_SRC/requirements.txt"; } | sha256 | cut -c1-16)
    MACHINE_DISTS_ERROR=
    if dists=$(machine_dists_key 2>/tmp/rlark-testbed-dists.$$); then
        WORKER_KEY=$({ echo "$VENV_KEY"; cat "$IMAGE_SRC/from-machine.txt" "$MACHINE_DISTS"; echo "$dists"; } \
            | sha256 | cut -c1-16)
    else
        WORKER_KEY=
        MACHINE_DISTS_ERROR=$(cat /tmp/rlark-testbed-dists.$$)
    fi
    rm -f /tmp/rlark-testbed-dists.$$
    PAUSE_KEY=$({ echo "pause $PAUSE_VERSION kubernetes $K8S_VERSION"; echo "$script"; } | sha256 | cut -c1-16)
    WORKER_IMAGE=$IMAGE_REPO/worker:$WORKER_KEY
    PAUSE_IMAGE=$IMAGE_REPO/pause:$PAUSE_VERSION-$PAUSE_KEY
}

image_built() {  # image_built DIR
    [ -f "$1/.complete" ] && [ -f "$1/image.tar" ] && [ -f "$1/name" ] && [ -f "$1/digest" ]
}

images_built() {
    image_keys
    [ -n "$WORKER_KEY" ] && image_built "$IMAGE_CACHE/worker-$WORKER_KEY" && image_built "$IMAGE_CACHE/pause-$PAUSE_KEY"
}

require_images() {
    images_built && return 0
    [ -n "$WORKER_KEY" ] || die "the Worker image's layer 3 cannot be made here: $MACHINE_DISTS_ERROR"
    die "the real node's images are not built (run: scripts/k8s-testbed build --real-node)"
}

layer_from() {  # layer_from OUT_DIR TAR_ARGS...: OUT_DIR/layer.tar.gz, its digest and diff_id
    local out=$1
    shift
    # numeric owners (the image's own users are in its /etc/passwd); sorted, so the same files
    # give the same layer
    tar --numeric-owner --sort=name --xattrs --xattrs-include='security.capability' -cf "$out/layer.tar" "$@" \
        || die "tar of a layer failed ($*)"
    sha256 <"$out/layer.tar" >"$out/diff_id"
    gzip -n -1 -f "$out/layer.tar"
    sha256 <"$out/layer.tar.gz" >"$out/digest"
}

layer_from_zstd() {  # layer_from_zstd OUT_DIR TAR_ARGS...: as layer_from, zstd-compressed and streamed:
    # a layer of gigabytes is never written out uncompressed, and containerd unpacks zstd several
    # times faster than gzip at each import (containerd reads zstd layers since 1.5)
    local out=$1 hasher
    shift
    rm -f "$out/tar.fifo"
    mkfifo "$out/tar.fifo"
    sha256 <"$out/tar.fifo" >"$out/diff_id" &
    hasher=$!
    tar --numeric-owner --xattrs --xattrs-include='security.capability' -cf - "$@" \
        | tee "$out/tar.fifo" | zstd -q -T0 -3 -o "$out/layer.tar.zst" \
        || { wait "$hasher"; die "tar of a layer failed ($*)"; }
    wait "$hasher"
    rm -f "$out/tar.fifo"
    sha256 <"$out/layer.tar.zst" >"$out/digest"
}

oci_image() {  # oci_image OUT NAME CONFIG_JSON LAYER_DIR...: OUT/image.tar, OUT/digest, OUT/name
    local out=$1 name=$2 config=$3 layout
    shift 3
    layout=$out/layout
    rm -rf "$layout"
    mkdir -p "$layout/blobs/sha256"
    local l layers="" d size media f
    for l in "$@"; do
        d=$(cat "$l/digest")
        f=$l/layer.tar.gz media=application/vnd.oci.image.layer.v1.tar+gzip
        [ -f "$l/layer.tar.zst" ] && f=$l/layer.tar.zst media=application/vnd.oci.image.layer.v1.tar+zstd
        ln -f "$f" "$layout/blobs/sha256/$d" 2>/dev/null || cp "$f" "$layout/blobs/sha256/$d"
        size=$(stat -c %s "$f")
        layers+="${layers:+,}{\"mediaType\":\"$media\",\"digest\":\"sha256:$d\",\"size\":$size}"
    done
    local cdigest csize manifest mdigest msize
    printf '%s' "$config" >"$out/config.json"
    cdigest=$(sha256 <"$out/config.json"); csize=$(stat -c %s "$out/config.json")
    cp "$out/config.json" "$layout/blobs/sha256/$cdigest"
    manifest="{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:$cdigest\",\"size\":$csize},\"layers\":[$layers]}"
    printf '%s' "$manifest" >"$layout/manifest.json"
    mdigest=$(sha256 <"$layout/manifest.json"); msize=$(stat -c %s "$layout/manifest.json")
    mv "$layout/manifest.json" "$layout/blobs/sha256/$mdigest"
    printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
    # containerd's importer names the image after io.containerd.image.name (client/import.go)
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
        "$mdigest" "$msize" "$name" "${name##*:}" >"$layout/index.json"
    tar -C "$layout" -cf "$out/image.tar" oci-layout index.json blobs || die "could not pack $name"
    rm -rf "$layout"
    echo "$name" >"$out/name"
    echo "sha256:$mdigest" >"$out/digest"
}

image_config() {  # image_config USER ENTRYPOINT_JSON CMD_JSON ENV_JSON DIFF_ID...
    local user=$1 entrypoint=$2 cmd=$3 env=$4 ids="" d
    shift 4
    for d in "$@"; do ids+="${ids:+,}\"sha256:$d\""; done
    printf '{"architecture":"amd64","os":"linux","config":{"User":"%s","Entrypoint":%s,"Cmd":%s,"Env":%s,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":[%s]}}' \
        "$user" "$entrypoint" "$cmd" "$env" "$ids"
}

build_pause_image() {  # build_pause_image OUT
    local out=$1 src
    command -v gcc >/dev/null || die "gcc is needed for the pause image (apt-get install gcc libc6-dev)"
    src=$(cd /tmp && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
    [ -f "$src/build/pause/linux/pause.c" ] || die "no build/pause/linux/pause.c in k8s.io/kubernetes@$K8S_VERSION"
    mkdir -p "$out/rootfs" "$out/l1"
    # as build/pause/Makefile compiles it
    gcc -Os -Wall -Werror -static "-DVERSION=v$PAUSE_VERSION-rlark-testbed" -o "$out/rootfs/pause" \
        "$src/build/pause/linux/pause.c" || die "could not compile pause.c (static: needs libc6-dev)"
    strip "$out/rootfs/pause"
    layer_from "$out/l1" -C "$out/rootfs" --owner=0 --group=0 pause
    oci_image "$out" "$PAUSE_IMAGE" "$(image_config 65535:65535 '["/pause"]' null \
        '["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]' "$(cat "$out/l1/diff_id")")" "$out/l1"
    rm -rf "$out/rootfs" "$out/l1" "$out/config.json"
}

in_rootfs() {  # in_rootfs ROOT COMMAND: run COMMAND (sh -c) chrooted in ROOT, in a private mount
    # namespace with /proc, /dev, the host's DNS and pip's CA bundle, cache and find-links
    # mounted; every mount ends with the namespace, whatever happens
    local root=$1 cmd=$2 ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
    local cache=${PIP_CACHE_DIR:-$HOME/.cache/pip} links=${PIP_FIND_LINKS:-}
    mkdir -p "$cache" "$root/run/rlark-build/pip-cache" "$root/run/rlark-build/find-links"
    touch "$root/run/rlark-build/ca.crt" "$root/etc/resolv.conf"
    local env=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
        PIP_CACHE_DIR=/run/rlark-build/pip-cache PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
        "PIP_DEFAULT_TIMEOUT=${PIP_DEFAULT_TIMEOUT:-120}")
    [ -f "$ca" ] && env+=(PIP_CERT=/run/rlark-build/ca.crt)
    [ -n "$links" ] && [ -d "$links" ] && env+=(PIP_FIND_LINKS=/run/rlark-build/find-links)
    local v
    for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL HTTP_PROXY HTTPS_PROXY NO_PROXY http_proxy https_proxy no_proxy; do
        [ -n "${!v:-}" ] && env+=("$v=${!v}")
    done
    unshare --mount --propagation private -- /bin/bash -euc '
        root=$1 ca=$2 cache=$3 links=$4; shift 4
        mount -t proc proc "$root/proc"
        mount --rbind /dev "$root/dev"
        mount --bind /etc/resolv.conf "$root/etc/resolv.conf"
        mount --bind "$cache" "$root/run/rlark-build/pip-cache"
        [ -f "$ca" ] && mount --bind "$ca" "$root/run/rlark-build/ca.crt"
        [ -n "$links" ] && [ -d "$links" ] && mount --bind "$links" "$root/run/rlark-build/find-links"
        exec chroot "$root" /usr/bin/env -i "$@"
    ' in_rootfs "$root" "$ca" "$cache" "$links" "${env[@]}" /bin/sh -euc "$cmd"
}

build_base_layer() {  # build_base_layer OUT: Debian minbase + worker-image/packages, user rlark
    local out=$1 root=$1/rootfs mirror pkgs
    command -v debootstrap >/dev/null || die "debootstrap is needed for the Worker image (apt-get install debootstrap)"
    mirror=$(debian_mirror)
    pkgs=$(image_packages | paste -sd, -)
    mkdir -p "$IMAGE_CACHE/debs" "$root"
    say "Worker image: debootstrap $DEBIAN_SUITE (minbase + $pkgs) from $mirror"
    # debootstrap mounts /proc and /sys in the target while it installs: in a private mount
    # namespace those mounts cannot outlive it
    unshare --mount --propagation private -- debootstrap --variant=minbase --include="$pkgs" \
        --cache-dir="$IMAGE_CACHE/debs" "$DEBIAN_SUITE" "$root" "$mirror" >"$out/debootstrap.log" 2>&1 \
        || { tail -n 30 "$out/debootstrap.log" >&2; die "debootstrap failed (log: $out/debootstrap.log)"; }
    in_rootfs "$root" 'useradd --uid 1000 --user-group --create-home --shell /bin/bash rlark'
    rm -rf "$root/run/rlark-build" "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
        "$root"/var/cache/apt/archives/*.deb "$root"/tmp/* "$root"/var/tmp/*
    # the kubelet and containerd provide these per container
    : >"$root/etc/resolv.conf"; : >"$root/etc/hostname"
    mkdir -p "$out/l1"
    layer_from "$out/l1" -C "$root" --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' .
}

cached_layer() {  # cached_layer DIR KEY WHAT BUILD_FN: DIR/layer.tar.gz, diff_id, digest, built by
    # BUILD_FN DIR (which leaves them in DIR/l) unless DIR/.complete says they are there
    local dir=$1 key=$2 what=$3 fn=$4 start
    if [ -f "$dir/.complete" ]; then
        say "Worker image: cached $what $dir"
        return 0
    fi
    start=$(now)
    rm -rf "$dir"
    mkdir -p "$dir"
    "$fn" "$dir"
    mv "$dir/l/layer.tar.gz" "$dir/l/diff_id" "$dir/l/digest" "$dir/"
    rm -rf "$dir/rootfs" "$dir/l"
    printf '%s %s\nbuilt in %s s\n' "$what" "$key" "$(elapsed "$start")" >"$dir/.complete"
    say "Worker image: $what built in $(elapsed "$start") s ($(du -sh "$dir/layer.tar.gz" | cut -f1) compressed)"
}

build_base_cached() {  # build_base_cached DIR: layer 1 into DIR/l
    build_base_layer "$1"
    mv "$1/l1" "$1/l"
}

build_venv_cached() {  # build_venv_cached DIR: layer 2 (/opt/venv, requirements.txt) into DIR/l
    local out=$1 root=$1/rootfs
    mkdir -p "$root" "$out/l"
    tar -C "$root" --numeric-owner -xzf "$IMAGE_CACHE/base-$BASE_KEY/layer.tar.gz" || die "could not unpack the base layer"
    mkdir -p "$root/run/rlark-build"
    cp "$IMAGE_SRC/requirements.txt" "$root/run/rlark-build/requirements.txt"
    say "Worker image: pip install -r worker-image/requirements.txt into /opt/venv"
    in_rootfs "$root" 'python3 -m venv /opt/venv && /opt/venv/bin/pip install -q -r /run/rlark-build/requirements.txt' \
        >"$out/pip.log" 2>&1 || { tail -n 30 "$out/pip.log" >&2; die "pip install in the Worker image failed (log: $out/pip.log)"; }
    rm -rf "$root/run/rlark-build"
    layer_from "$out/l" -C "$root" ./opt/venv
}

link_layer() {  # link_layer FROM_DIR TO_DIR: a cached layer's files, for oci_image
    mkdir -p "$2"
    ln -f "$1/layer.tar.gz" "$2/layer.tar.gz" 2>/dev/null || cp "$1/layer.tar.gz" "$2/layer.tar.gz"
    cp "$1/diff_id" "$1/digest" "$2/"
}

build_worker_image() {  # build_worker_image OUT
    local out=$1 base=$IMAGE_CACHE/base-$BASE_KEY venv=$IMAGE_CACHE/venv-$VENV_KEY root=$1/rootfs t0
    [ -n "$WORKER_KEY" ] || die "the Worker image's layer 3 cannot be made here: $MACHINE_DISTS_ERROR"
    command -v zstd >/dev/null || die "zstd is needed for the Worker image's layer 3 (apt-get install zstd)"
    cached_layer "$base" "$BASE_KEY" "base layer" build_base_cached
    cached_layer "$venv" "$VENV_KEY" "virtualenv layer" build_venv_cached
    # layer 3 goes on the two below, unpacked, so the image's own python can try it
    mkdir -p "$root" "$out/l3"
    tar -C "$root" --numeric-owner -xzf "$base/layer.tar.gz" || die "could not unpack the base layer"
    tar -C "$root" --numeric-owner -xzf "$venv/layer.tar.gz" || die "could not unpack the virtualenv layer"
    [ -x "$root/usr/bin/python$IMAGE_PYTHON_MINOR" ] || die "the image has no python$IMAGE_PYTHON_MINOR (worker-image/packages)"
    t0=$(now)
    say "Worker image: layer 3 from $("$IMAGE_PYTHON" -c 'import sys; print(sys.prefix)') (worker-image/from-machine.txt)"
    "$IMAGE_PYTHON" "$MACHINE_DISTS" copy "$IMAGE_SRC/from-machine.txt" --python "$IMAGE_PYTHON_MINOR" \
        --root "$root" --site "$IMAGE_SITE" --files "$out/l3.files" 2>"$out/machine-dists.log" \
        || { tail -n 20 "$out/machine-dists.log" >&2; die "could not copy layer 3's distributions (log: $out/machine-dists.log)"; }
    say "Worker image: $(tail -n 1 "$out/machine-dists.log") in $(elapsed "$t0") s"
    # what the quickstart imports, by the Python a Worker runs (/opt/venv's: PATH in the config)
    t0=$(now)
    in_rootfs "$root" "/opt/venv/bin/python -c 'import time; t = time.monotonic(); import torch, rlinf.scheduler; print(\"torch\", torch.__version__, \"import\", round(time.monotonic() - t, 1), \"s\")'" \
        >"$out/import.log" 2>&1 \
        || { tail -n 30 "$out/import.log" >&2; die "the Worker image cannot import torch and rlinf.scheduler (log: $out/import.log)"; }
    say "Worker image: $(tail -n 1 "$out/import.log") (cold: the first import after the copy)"
    t0=$(now)
    layer_from_zstd "$out/l3" -C "$root" --null --no-recursion -T "$out/l3.files"
    say "Worker image: layer 3 packed in $(elapsed "$t0") s ($(du -sh "$out/l3/layer.tar.zst" | cut -f1) zstd)"
    link_layer "$base" "$out/l1"
    link_layer "$venv" "$out/l2"
    local env='["PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","LANG=C.UTF-8","VIRTUAL_ENV=/opt/venv"]'
    oci_image "$out" "$WORKER_IMAGE" "$(image_config 1000 null '["python3"]' "$env" \
        "$(cat "$out/l1/diff_id")" "$(cat "$out/l2/diff_id")" "$(cat "$out/l3/diff_id")")" "$out/l1" "$out/l2" "$out/l3"
    rm -rf "$root" "$out/l1" "$out/l2" "$out/l3" "$out/l3.files" "$out/config.json"
}

build_images() {  # build_images [FORCE]: the pause and Worker images, unless cached
    local force=${1:-0} kind dir start
    image_keys
    mkdir -p "$IMAGE_CACHE"
    exec 6>"$IMAGE_CACHE/.build.lock"
    if ! flock -n 6; then
        say "another build holds $IMAGE_CACHE/.build.lock; waiting for it"
        flock 6
    fi
    for kind in pause worker; do
        if [ "$kind" = pause ]; then dir=$IMAGE_CACHE/pause-$PAUSE_KEY; else dir=$IMAGE_CACHE/worker-$WORKER_KEY; fi
        if [ "$force" = 0 ] && image_built "$dir"; then
            say "cached: $(cat "$dir/name") in $dir"
            continue
        fi
        [ "$force" = 1 ] && [ "$kind" = worker ] && rm -rf "$IMAGE_CACHE/base-$BASE_KEY" "$IMAGE_CACHE/venv-$VENV_KEY"
        start=$(now)
        rm -rf "$dir.partial"
        mkdir -p "$dir.partial"
        "build_${kind}_image" "$dir.partial"
        printf '%s\nbuilt in %s s\n' "$(cat "$dir.partial/name")" "$(elapsed "$start")" >"$dir.partial/.complete"
        rm -rf "$dir"
        mv "$dir.partial" "$dir"
        say "built $(cat "$dir/name") in $(elapsed "$start") s: $(du -sh "$dir/image.tar" | cut -f1) ($(cat "$dir/digest"))"
    done
    exec 6>&-
}
