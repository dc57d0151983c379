# shellcheck shell=bash
# Sourced by scripts/k8s-testbed: the real node's container images, built from local files because
# no image registry is reachable here, and imported into containerd's image store by `up`.
#
# * the Worker image rlark.test/worker:<key>: Debian bookworm from debootstrap (minbase) with the
#   packages in worker-image/packages (layer 1), and a virtualenv /opt/venv with
#   worker-image/requirements.txt installed by the image's own pip (layer 2), user rlark (1000);
# * the pause image rlark.test/pause:3.10.2: Kubernetes' own pause.c from the k8s.io/kubernetes
#   module, compiled static, alone in one layer.
#
# Each is an OCI image layout written here (blobs, manifest, index.json naming the image with
# containerd's io.containerd.image.name annotation) and packed as a tar `ctr images import` reads.
# Each is cached under $CACHE_ROOT/images by a hash of its inputs: the input files and this script
# (any change to either builds a new image; the Debian packages and wheels come from Debian's
# archive and PyPI at build time, so the same key may hold newer patch releases than an older
# build of the same inputs).

IMAGE_CACHE=$CACHE_ROOT/images
IMAGE_SRC=$REPO/scripts/k8s-testbed.d/worker-image
IMAGE_SCRIPT=$REPO/scripts/k8s-testbed.d/image.sh
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

image_keys() {  # sets BASE_KEY, WORKER_KEY, PAUSE_KEY, WORKER_IMAGE, PAUSE_IMAGE
    local script
    script=$(sha256 <"$IMAGE_SCRIPT")
    BASE_KEY=$({ echo "debian $DEBIAN_SUITE minbase"; image_packages; echo "$script"; } | sha256 | cut -c1-16)
    WORKER_KEY=$({ echo "$BASE_KEY"; cat "$IMAGE_SRC/requirements.txt"; } | sha256 | cut -c1-16)
    PAUSE_KEY=$({ echo "pause $PAUSE_VERSION kubernetes $K8S_VERSION"; echo "$script"; } | sha256 | cut -c1-16)
    WORKER_IMAGE=$IMAGE_REPO/worker:$WORKER_KEY
    PAUSE_IMAGE=$IMAGE_REPO/pause:$PAUSE_VERSION-$PAUSE_KEY
}

image_built() {  # image_built DIR
    [ -f "$1/.complete" ] && [ -f "$1/image.tar" ] && [ -f "$1/name" ] && [ -f "$1/digest" ]
}

images_built() {
    image_keys
    image_built "$IMAGE_CACHE/worker-$WORKER_KEY" && image_built "$IMAGE_CACHE/pause-$PAUSE_KEY"
}

require_images() {
    images_built || die "the real node's images are not built (run: scripts/k8s-testbed build --real-node)"
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

oci_image() {  # oci_image OUT NAME CONFIG_JSON LAYER_DIR...: OUT/image.tar, OUT/digest, OUT/name
    local out=$1 name=$2 config=$3 layout
    shift 3
    layout=$out/layout
    rm -rf "$layout"
    mkdir -p "$layout/blobs/sha256"
    local l layers="" d size
    for l in "$@"; do
        d=$(cat "$l/digest")
        ln -f "$l/layer.tar.gz" "$layout/blobs/sha256/$d" 2>/dev/null || cp "$l/layer.tar.gz" "$layout/blobs/sha256/$d"
        size=$(stat -c %s "$l/layer.tar.gz")
        layers+="${layers:+,}{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:$d\",\"size\":$size}"
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

build_worker_image() {  # build_worker_image OUT
    local out=$1 base=$IMAGE_CACHE/base-$BASE_KEY start
    if [ ! -f "$base/.complete" ]; then
        start=$(now)
        rm -rf "$base"
        mkdir -p "$base"
        build_base_layer "$base"
        mv "$base/l1/layer.tar.gz" "$base/l1/diff_id" "$base/l1/digest" "$base/"
        rm -rf "$base/rootfs" "$base/l1"
        printf 'base layer %s\nbuilt in %s s\n' "$BASE_KEY" "$(elapsed "$start")" >"$base/.complete"
        say "Worker image: base layer built in $(elapsed "$start") s ($(du -sh "$base/layer.tar.gz" | cut -f1) compressed)"
    else
        say "Worker image: cached base layer $base"
    fi
    local root=$out/rootfs
    mkdir -p "$root" "$out/l2"
    tar -C "$root" --numeric-owner -xzf "$base/layer.tar.gz" || die "could not unpack the base layer"
    mkdir -p "$root/run/rlark-build"
    cp "$IMAGE_SRC/requirements.txt" "$root/run/rlark-build/requirements.txt"
    say "Worker image: pip install -r worker-image/requirements.txt into /opt/venv"
    in_rootfs "$root" 'python3 -m venv /opt/venv && /opt/venv/bin/pip install -q -r /run/rlark-build/requirements.txt' \
        >"$out/pip.log" 2>&1 || { tail -n 30 "$out/pip.log" >&2; die "pip install in the Worker image failed (log: $out/pip.log)"; }
    rm -rf "$root/run/rlark-build"
    layer_from "$out/l2" -C "$root" ./opt/venv
    local env='["PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","LANG=C.UTF-8","VIRTUAL_ENV=/opt/venv"]'
    ln -f "$base/layer.tar.gz" "$out/l1.tar.gz" 2>/dev/null || cp "$base/layer.tar.gz" "$out/l1.tar.gz"
    mkdir -p "$out/l1" && mv "$out/l1.tar.gz" "$out/l1/layer.tar.gz" && cp "$base/diff_id" "$base/digest" "$out/l1/"
    oci_image "$out" "$WORKER_IMAGE" "$(image_config 1000 null '["python3"]' "$env" \
        "$(cat "$out/l1/diff_id")" "$(cat "$out/l2/diff_id")")" "$out/l1" "$out/l2"
    rm -rf "$root" "$out/l1" "$out/l2" "$out/config.json"
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
        [ "$force" = 1 ] && [ "$kind" = worker ] && rm -rf "$IMAGE_CACHE/base-$BASE_KEY"
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
