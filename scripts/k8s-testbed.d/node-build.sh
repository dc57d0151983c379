# shellcheck shell=bash
# Sourced by scripts/k8s-testbed: building the parts of the real node (containerd, runc, CNI
# plugins, CoreDNS; the kubelet is built with the control plane) from Go modules into the cache,
# one directory per part and version, so a new version of one part rebuilds only that part. docs/kubernetes.md ("Real node") says why these
# versions.

# Kubernetes 1.36 supports containerd 2.2+ and 2.3+ (containerd's RELEASES.md, "Kubernetes
# support"); containerd 1.x lacks the RuntimeConfig CRI call the kubelet reads the cgroup driver
# from. containerd v2.3.x tests against runc v1.5.2 (its script/setup/runc-version) and builds
# with the CNI plugins v1.9.1 (its go.mod). kubeadm 1.36 installs CoreDNS v1.14.2 (its constants).
CONTAINERD_VERSION=${RLARK_TESTBED_CONTAINERD_VERSION:-v2.3.7}
RUNC_VERSION=${RLARK_TESTBED_RUNC_VERSION:-v1.5.2}
CNI_PLUGINS_VERSION=${RLARK_TESTBED_CNI_PLUGINS_VERSION:-v1.9.1}
COREDNS_VERSION=${RLARK_TESTBED_COREDNS_VERSION:-v1.14.2}
# the pause image's version is the one kubeadm 1.36 names (its constants); built from pause.c of
# the k8s.io/kubernetes module itself
PAUSE_VERSION=3.10.2

NODE_CACHE=$CACHE_ROOT/node
CONTAINERD_DIR=$NODE_CACHE/containerd-$CONTAINERD_VERSION
RUNC_DIR=$NODE_CACHE/runc-$RUNC_VERSION
CNI_DIR=$NODE_CACHE/cni-plugins-$CNI_PLUGINS_VERSION
COREDNS_DIR=$NODE_CACHE/coredns-$COREDNS_VERSION
# the CNI plugins the node uses: bridge and host-local make the Pod network, loopback is run by
# containerd for every sandbox's lo; portmap (hostPort) is built but left out of the chain (it
# needs iptables, which this machine does not have; RLark's Pods use no hostPort)
CNI_PLUGINS=(bridge host-local loopback portmap)

# node_parts: "NAME DIR BUILDER BINARIES..." for each part, in build order
node_parts() {
    echo "runc $RUNC_DIR build_runc runc"
    echo "containerd $CONTAINERD_DIR build_containerd containerd containerd-shim-runc-v2 ctr"
    echo "cni-plugins $CNI_DIR build_cni_plugins ${CNI_PLUGINS[*]}"
    echo "coredns $COREDNS_DIR build_coredns coredns"
}

part_built() {  # part_built DIR BINARIES...
    local dir=$1 b
    shift
    [ -f "$dir/bin/.complete" ] || return 1
    for b in "$@"; do [ -x "$dir/bin/$b" ] || return 1; done
}

node_built() {
    local name dir fn bins
    while read -r name dir fn bins; do
        # shellcheck disable=SC2086
        part_built "$dir" $bins || return 1
    done < <(node_parts)
}

module_goversion() {  # module_goversion MODULE@VERSION: the go directive of its go.mod
    local gomod
    gomod=$(cd /tmp && gomod_of "$1")
    [ -f "$gomod" ] || die "no go.mod for $1 in the module cache"
    awk '$1 == "go" { print $2; exit }' "$gomod"
}

build_runc() {  # build_runc OUT
    local out=$1 dir=$NODE_CACHE/src/runc
    # runc is cgo (its nsenter is C) and needs libseccomp for seccomp profiles (RuntimeDefault)
    pkg-config --exists libseccomp 2>/dev/null \
        || die "runc needs libseccomp's headers: apt-get install libseccomp-dev"
    write_module "$dir" rlark.invalid/k8s-testbed/runc "$(module_goversion "github.com/opencontainers/runc@$RUNC_VERSION")" \
        "	github.com/opencontainers/runc $RUNC_VERSION" "" github.com/opencontainers/runc
    say "runc $RUNC_VERSION: compiling (cgo, seccomp)"
    (cd "$dir" && CGO_ENABLED=1 go build -p "${RLARK_TESTBED_BUILD_JOBS:-2}" -trimpath -buildmode=pie \
        -tags "seccomp urfave_cli_no_docs" \
        -ldflags "-s -w -X main.version=${RUNC_VERSION#v} -X main.gitCommit=module" \
        -o "$out/runc" github.com/opencontainers/runc) || die "go build runc failed"
}

build_containerd() {  # build_containerd OUT
    local out=$1 dir=$NODE_CACHE/src/containerd m=github.com/containerd/containerd/v2
    write_module "$dir" rlark.invalid/k8s-testbed/containerd "$(module_goversion "$m@$CONTAINERD_VERSION")" \
        "	$m $CONTAINERD_VERSION" "" "$m/cmd/containerd" "$m/cmd/containerd-shim-runc-v2" "$m/cmd/ctr"
    local ld="-X $m/version.Version=$CONTAINERD_VERSION -X $m/version.Revision=module -X $m/version.Package=$m"
    say "containerd $CONTAINERD_VERSION: compiling containerd, ctr, containerd-shim-runc-v2"
    # as containerd's Makefile: no btrfs snapshotter (it needs btrfs headers; overlayfs is used),
    # and a static shim without gRPC
    (cd "$dir" && go build -p "${RLARK_TESTBED_BUILD_JOBS:-2}" -trimpath -tags "no_btrfs urfave_cli_no_docs" \
        -ldflags "-s -w $ld" -o "$out/" "$m/cmd/containerd" "$m/cmd/ctr") || die "go build containerd failed"
    (cd "$dir" && CGO_ENABLED=0 go build -p "${RLARK_TESTBED_BUILD_JOBS:-2}" -trimpath \
        -tags "no_grpc urfave_cli_no_docs" -ldflags "-s -w $ld" \
        -o "$out/containerd-shim-runc-v2" "$m/cmd/containerd-shim-runc-v2") || die "go build containerd-shim-runc-v2 failed"
}

build_cni_plugins() {  # build_cni_plugins OUT
    local out=$1 dir=$NODE_CACHE/src/cni-plugins m=github.com/containernetworking/plugins p pkgs=()
    for p in bridge host-local loopback portmap; do
        case $p in
            host-local) pkgs+=("$m/plugins/ipam/host-local") ;;
            portmap) pkgs+=("$m/plugins/meta/portmap") ;;
            *) pkgs+=("$m/plugins/main/$p") ;;
        esac
    done
    write_module "$dir" rlark.invalid/k8s-testbed/cni-plugins "$(module_goversion "$m@$CNI_PLUGINS_VERSION")" \
        "	$m $CNI_PLUGINS_VERSION" "" "${pkgs[@]}"
    say "CNI plugins $CNI_PLUGINS_VERSION: compiling ${CNI_PLUGINS[*]}"
    (cd "$dir" && CGO_ENABLED=0 go build -p "${RLARK_TESTBED_BUILD_JOBS:-2}" -trimpath \
        -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION" \
        -o "$out/" "${pkgs[@]}") || die "go build of the CNI plugins failed"
}

build_coredns() {  # build_coredns OUT
    local out=$1 dir=$NODE_CACHE/src/coredns m=github.com/coredns/coredns
    # CoreDNS's own main links every plugin (cloud DNS providers, etcd, ...): a main of our own
    # with only the plugins the test bed's Corefile uses keeps the build small. Plugins register
    # themselves when imported; coremain is CoreDNS's entry point.
    local plugins=(bind cache errors forward health kubernetes log ready) p
    write_module "$dir" rlark.invalid/k8s-testbed/coredns "$(module_goversion "$m@$COREDNS_VERSION")" \
        "	$m $COREDNS_VERSION" "" "$m/coremain" "${plugins[@]/#/$m/plugin/}"
    {
        echo "// Generated by scripts/k8s-testbed: CoreDNS with the plugins the test bed's Corefile uses."
        echo "package main"
        echo
        echo "import ("
        for p in "${plugins[@]}"; do echo "	_ \"$m/plugin/$p\""; done
        echo
        echo "	\"$m/coremain\""
        echo ")"
        echo
        echo "func main() { coremain.Run() }"
    } >"$dir/main.go"
    say "CoreDNS $COREDNS_VERSION: compiling (plugins: ${plugins[*]})"
    (cd "$dir" && CGO_ENABLED=0 go build -p "${RLARK_TESTBED_BUILD_JOBS:-2}" -trimpath \
        -ldflags "-s -w -X $m/coremain.GitCommit=module" -o "$out/coredns" .) || die "go build coredns failed"
}

build_node() {  # build_node [--force]: every part not yet cached
    local force=${1:-0} name dir fn bins start total
    command -v go >/dev/null || die "go is not installed (the real node is built from Go modules)"
    mkdir -p "$NODE_CACHE"
    exec 7>"$NODE_CACHE/.build.lock"
    if ! flock -n 7; then
        say "another build holds $NODE_CACHE/.build.lock; waiting for it"
        flock 7
    fi
    total=$(now)
    while read -r name dir fn bins; do
        # shellcheck disable=SC2086
        if [ "$force" = 0 ] && part_built "$dir" $bins; then
            say "cached: $name in $dir/bin"
            continue
        fi
        start=$(now)
        rm -rf "$dir/bin.partial"
        mkdir -p "$dir/bin.partial"
        "$fn" "$dir/bin.partial"
        local b
        for b in $bins; do [ -x "$dir/bin.partial/$b" ] || die "the $name build produced no $b"; done
        printf '%s\nbuilt in %s s\n%s\n' "$name $(basename "$dir")" "$(elapsed "$start")" "$(go version)" \
            >"$dir/bin.partial/.complete"
        rm -rf "$dir/bin"
        mv "$dir/bin.partial" "$dir/bin"
        say "built $name in $(elapsed "$start") s: $dir/bin ($(du -sh "$dir/bin" | cut -f1))"
    done < <(node_parts)
    exec 7>&-
    say "real node parts ready in $(elapsed "$total") s ($(du -sh "$NODE_CACHE" | cut -f1) in $NODE_CACHE)"
}
