# shellcheck shell=bash
# Sourced by scripts/k8s-testbed after image.sh (a file of its own: image.sh's hash keys the
# images, so a change here does not rebuild them).

STORE_SCRIPT=$REPO/scripts/k8s-testbed.d/image-store.sh

# `ctr images import` of the Worker image (2.7 GB, most of it torch) unpacks every layer into
# containerd's snapshots: 68 s on a quiet machine, over 190 s beside the test suite, at every `up`.
# So the build imports both images once into a containerd root kept in the cache (store-<key>),
# and `up` gives each real node a copy of it: its files hard-linked (a committed snapshot and a
# content blob are never written again; a container writes only into its own new snapshot) and
# its bolt databases copied (containerd writes those in place).

store_keys() {  # sets STORE_KEY and STORE_DIR (after image_keys)
    STORE_KEY=$({ echo "store $WORKER_KEY $PAUSE_KEY containerd $CONTAINERD_VERSION"; sha256 <"$STORE_SCRIPT"; } \
        | sha256 | cut -c1-16)
    STORE_DIR=$IMAGE_CACHE/store-$STORE_KEY
}

image_store_built() {
    store_keys
    [ -f "$STORE_DIR/.complete" ] && [ -d "$STORE_DIR/root" ]
}

store_ctr() {  # store_ctr SOCKET ARGS...
    local sock=$1
    shift
    "$CONTAINERD_DIR/bin/ctr" --address "$sock" "$@"
}

import_images() {  # import_images SOCKET LOG: both images into containerd's k8s.io namespace, each
    # also named by its digest (a pull by tag records repo@digest, which the kubelet reports as a
    # container's imageID; an import records only the tag)
    local sock=$1 log=$2 img t0 name digest names
    for img in "$IMAGE_CACHE/pause-$PAUSE_KEY" "$IMAGE_CACHE/worker-$WORKER_KEY"; do
        t0=$(now)
        name=$(cat "$img/name"); digest=$(cat "$img/digest")
        store_ctr "$sock" -n k8s.io images import "$img/image.tar" >>"$log" 2>&1 \
            || { tail -n 20 "$log" >&2; die "could not import $name into containerd"; }
        store_ctr "$sock" -n k8s.io images tag "$name" "${name%:*}@$digest" >>"$log" 2>&1 \
            || { tail -n 20 "$log" >&2; die "could not name $name by its digest $digest"; }
        say "imported $name ($digest) in $(elapsed "$t0") s"
    done
    images_in_store "$sock" "$log" || die "containerd lacks an image just imported (log: $log)"
}

images_in_store() {  # images_in_store SOCKET LOG: both images there, by name and by digest
    local sock=$1 log=$2 img names name digest
    names=$(store_ctr "$sock" -n k8s.io images ls -q 2>>"$log") || return 1
    for img in "$IMAGE_CACHE/pause-$PAUSE_KEY" "$IMAGE_CACHE/worker-$WORKER_KEY"; do
        name=$(cat "$img/name"); digest=$(cat "$img/digest")
        grep -qxF "$name" <<<"$names" && grep -qxF "${name%:*}@$digest" <<<"$names" || return 1
    done
}

build_image_store() {  # build_image_store FORCE: STORE_DIR/root, both images imported and unpacked
    local force=$1 tmp pid i
    store_keys
    if [ "$force" = 0 ] && image_store_built; then
        say "cached: the unpacked image store in $STORE_DIR"
        return 0
    fi
    node_built || die "the real node's parts are not built (containerd unpacks the images)"
    # one build at a time (build_images' lock: a store is made from its images)
    exec 7>"$IMAGE_CACHE/.build.lock"
    if ! flock -n 7; then
        say "another build holds $IMAGE_CACHE/.build.lock; waiting for it"
        flock 7
    fi
    if [ "$force" = 0 ] && image_store_built; then
        exec 7>&-
        say "cached: the unpacked image store in $STORE_DIR (built meanwhile)"
        return 0
    fi
    local start
    start=$(now)
    rm -rf "$STORE_DIR.partial"
    mkdir -p "$STORE_DIR.partial/root"
    # containerd's sockets: a short path (107 bytes at most, unix(7))
    tmp=$(mktemp -d /tmp/rlark-store.XXXXXX)
    # the images alone: no CRI (nothing runs here)
    containerd_config_base "$STORE_DIR.partial/root" "$tmp/state" "$tmp/c.sock" "$tmp/opt" \
        io.containerd.grpc.v1.cri io.containerd.cri.v1.runtime io.containerd.cri.v1.images \
        io.containerd.podsandbox.controller.v1.podsandbox >"$tmp/config.toml"
    "$CONTAINERD_DIR/bin/containerd" --config "$tmp/config.toml" --log-level warn >"$tmp/containerd.log" 2>&1 &
    pid=$!
    for ((i = 0; i < 300; i++)); do
        store_ctr "$tmp/c.sock" version >/dev/null 2>&1 && break
        kill -0 "$pid" 2>/dev/null || { cat "$tmp/containerd.log" >&2; die "containerd (for the image store) exited"; }
        sleep 0.1
    done
    [ "$i" -lt 300 ] || { kill "$pid"; cat "$tmp/containerd.log" >&2; die "containerd (for the image store) did not answer in 30 s"; }
    ( import_images "$tmp/c.sock" "$tmp/import.log" ) || { kill "$pid"; wait "$pid"; rm -rf "$tmp"; die "could not fill the image store"; }
    kill "$pid"
    wait "$pid" || true
    rm -rf "$tmp"
    echo "built in $(elapsed "$start") s" >"$STORE_DIR.partial/.complete"
    rm -rf "$STORE_DIR"
    mv "$STORE_DIR.partial" "$STORE_DIR"
    # an older key's store is 5-8 GB of nothing now
    local old
    for old in "$IMAGE_CACHE"/store-*; do
        [ "$old" = "$STORE_DIR" ] || rm -rf "$old"
    done
    exec 7>&-
    say "built the unpacked image store in $(elapsed "$start") s: $(du -sh "$STORE_DIR" | cut -f1)"
}

copy_image_store() {  # copy_image_store ROOT: containerd's root from the store, or return 1
    local root=$1 db
    image_store_built || return 1
    cp -al "$STORE_DIR/root" "$root" || return 1
    while IFS= read -r -d '' db; do
        cp --remove-destination "$STORE_DIR/root/${db#"$root"/}" "$db" || return 1
    done < <(find "$root" -type f -name '*.db' -print0)
}
