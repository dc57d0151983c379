# shellcheck shell=bash
# Sourced by scripts/k8s-testbed: the KubeRay operator (`build --kuberay`), built from its Go module
# github.com/ray-project/kuberay/ray-operator so that bench/k8s_scale.py can run it, as a local
# process with the admin kubeconfig, against the test bed's API server beside RLark.

# v1.5.0 is the newest ray-operator release on the Go module proxy (it also serves v1.4.0); its
# go.mod says go 1.24.0 and has no replace directives, so a module that requires it builds with
# its exact dependency versions (minimal version selection). The operator's main package is the
# module's root (main.go).
KUBERAY_VERSION=${RLARK_TESTBED_KUBERAY_VERSION:-v1.5.0}
KUBERAY_DIR=$CACHE_ROOT/kuberay-$KUBERAY_VERSION

kuberay_built() {
    [ -f "$KUBERAY_DIR/bin/.complete" ] && [ -x "$KUBERAY_DIR/bin/ray-operator" ] \
        && [ -f "$KUBERAY_DIR/crds/ray.io_rayclusters.yaml" ]
}

build_kuberay() {  # build_kuberay FORCE
    local force=$1
    if [ "$force" = 0 ] && kuberay_built; then
        say "cached: $KUBERAY_DIR (KubeRay $KUBERAY_VERSION)"
        return 0
    fi
    command -v go >/dev/null || die "go is not installed (KubeRay is built from its Go module)"
    mkdir -p "$CACHE_ROOT"
    exec 7>"$CACHE_ROOT/.kuberay-build.lock"
    if ! flock -n 7; then
        say "another build holds $CACHE_ROOT/.kuberay-build.lock; waiting for it"
        flock 7
    fi
    if [ "$force" = 0 ] && kuberay_built; then
        say "cached: $KUBERAY_DIR"
        exec 7>&-
        return 0
    fi
    local start gomod goversion src out=$KUBERAY_DIR.partial dir=$KUBERAY_DIR.partial/src
    local module=github.com/ray-project/kuberay/ray-operator
    start=$(now)
    say "building KubeRay $KUBERAY_VERSION into $KUBERAY_DIR ($(go version))"
    gomod=$(cd /tmp && gomod_of "$module@$KUBERAY_VERSION")
    [ -f "$gomod" ] || die "no go.mod for $module@$KUBERAY_VERSION in the module cache"
    goversion=$(awk '$1 == "go" { print $2; exit }' "$gomod")
    rm -rf "$out"
    mkdir -p "$out/bin" "$out/crds"
    write_module "$dir" rlark.invalid/k8s-testbed/kuberay "$goversion" \
        "	$module $KUBERAY_VERSION" "" "$module"
    say "kuberay $KUBERAY_VERSION: compiling (go $goversion)"
    (cd "$dir" && go build -p "${RLARK_TESTBED_BUILD_JOBS:-2}" -trimpath -ldflags "-s -w" \
        -o "$out/bin/ray-operator" "$module") || die "go build $module failed"
    src=$(cd "$dir" && go list -m -f '{{.Dir}}' "$module") || die "cannot locate KubeRay's source"
    # the CRDs as generated (config/crd/bases); the bench applies them server-side (they are
    # larger than a client-side apply's last-applied annotation may hold)
    cp "$src"/config/crd/bases/*.yaml "$out/crds/" \
        || die "KubeRay $KUBERAY_VERSION has no CRDs under config/crd/bases"
    [ -f "$out/crds/ray.io_rayclusters.yaml" ] || die "KubeRay $KUBERAY_VERSION has no RayCluster CRD"
    chmod -R u+w "$out"
    printf 'kuberay %s\n%s\n' "$KUBERAY_VERSION" "$(go version)" >"$out/bin/.complete"
    rm -rf "$KUBERAY_DIR"
    mv "$out" "$KUBERAY_DIR"
    exec 7>&-
    say "built KubeRay $KUBERAY_VERSION in $(elapsed "$start") s: $KUBERAY_DIR/bin/ray-operator ($(du -sh "$KUBERAY_DIR/bin/ray-operator" | cut -f1))"
}
