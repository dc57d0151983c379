# shellcheck shell=bash
# Sourced by scripts/k8s-testbed: Kueue (`build --kueue`, `up --kueue`), the queueing and gang
# admission controller of sigs.k8s.io/kueue, built from its Go module and run as one more local
# process beside the control plane (docs/kubernetes.md, "Kueue in the test bed").

# Kueue v0.17.0 is the newest release on the Go module proxy; its go.mod says go 1.25.0 and builds
# against k8s.io/* v0.35 and controller-runtime v0.23 (one minor behind the API server's 1.36,
# within client-go's supported skew). It is built from its own go.mod, not with the control
# plane's v0.36 libraries.
KUEUE_VERSION=${RLARK_TESTBED_KUEUE_VERSION:-v0.17.0}
KUEUE_DIR=$CACHE_ROOT/kueue-$KUEUE_VERSION

# The namespace label that puts a namespace under Kueue's Pod integration (its webhook and its
# managedJobsNamespaceSelector both select on it): only RLark's project namespaces carry it.
KUEUE_NAMESPACE_LABEL=rlark.io/kueue
KUEUE_NAMESPACE_LABEL_VALUE=enabled
KUEUE_NAMESPACE=kueue-system

kueue_built() {
    [ -f "$KUEUE_DIR/bin/.complete" ] && [ -x "$KUEUE_DIR/bin/kueue" ] \
        && [ -d "$KUEUE_DIR/crds" ] && [ -f "$KUEUE_DIR/webhook/manifests.yaml" ] \
        && [ -f "$KUEUE_DIR/conversion-crds.txt" ]
}

require_kueue_built() {
    kueue_built || die "Kueue $KUEUE_VERSION is not built (run: scripts/k8s-testbed build --kueue)"
}

build_kueue() {  # build_kueue FORCE
    local force=$1
    if [ "$force" = 0 ] && kueue_built; then
        say "cached: $KUEUE_DIR (Kueue $KUEUE_VERSION)"
        return 0
    fi
    command -v go >/dev/null || die "go is not installed (Kueue is built from its Go module)"
    mkdir -p "$CACHE_ROOT"
    exec 6>"$CACHE_ROOT/.kueue-build.lock"
    if ! flock -n 6; then
        say "another build holds $CACHE_ROOT/.kueue-build.lock; waiting for it"
        flock 6
    fi
    if [ "$force" = 0 ] && kueue_built; then
        say "cached: $KUEUE_DIR"
        exec 6>&-
        return 0
    fi
    local start gomod goversion src out=$KUEUE_DIR.partial dir=$KUEUE_DIR.partial/src
    start=$(now)
    say "building Kueue $KUEUE_VERSION into $KUEUE_DIR ($(go version))"
    gomod=$(cd /tmp && gomod_of "sigs.k8s.io/kueue@$KUEUE_VERSION")
    [ -f "$gomod" ] || die "no go.mod for sigs.k8s.io/kueue@$KUEUE_VERSION in the module cache"
    goversion=$(awk '$1 == "go" { print $2; exit }' "$gomod")
    rm -rf "$out"
    mkdir -p "$out/bin" "$out/crds" "$out/webhook"
    # Kueue's go.mod has no replace directives: a module that requires it gets its exact
    # dependency versions (minimal version selection)
    write_module "$dir" rlark.invalid/k8s-testbed/kueue "$goversion" \
        "	sigs.k8s.io/kueue $KUEUE_VERSION" "" sigs.k8s.io/kueue/cmd/kueue
    say "kueue $KUEUE_VERSION: compiling (go $goversion)"
    local ld="-X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
    ld+=" -X sigs.k8s.io/kueue/pkg/version.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    (cd "$dir" && go build -p "${RLARK_TESTBED_BUILD_JOBS:-2}" -trimpath -ldflags "-s -w $ld" \
        -o "$out/bin/kueue" sigs.k8s.io/kueue/cmd/kueue) || die "go build sigs.k8s.io/kueue/cmd/kueue failed"
    src=$(cd "$dir" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue) || die "cannot locate Kueue's source"
    # the CRDs as generated (no kustomize patches: `up` adds the conversion webhook itself) and
    # the generated webhook configurations, which `up` points at the local manager
    cp "$src"/config/components/crd/bases/*.yaml "$out/crds/" \
        || die "Kueue $KUEUE_VERSION has no CRDs under config/components/crd/bases"
    cp "$src/config/components/webhook/manifests.yaml" "$out/webhook/" \
        || die "Kueue $KUEUE_VERSION has no config/components/webhook/manifests.yaml"
    [ -f "$out/crds/kueue.x-k8s.io_workloads.yaml" ] || die "Kueue $KUEUE_VERSION has no Workload CRD"
    # the CRDs Kueue's own kustomization gives a conversion webhook (v1beta1 <-> v1beta2): the
    # patches it lists, not the ones it leaves commented out
    local patch crds=$src/config/components/crd
    : >"$out/conversion-crds.txt"
    for patch in $(awk '$1 == "-" && $2 == "path:" && $3 ~ /^patches\/webhook_in_/ { print $3 }' "$crds/kustomization.yaml"); do
        awk '$1 == "name:" { print $2; exit }' "$crds/$patch" >>"$out/conversion-crds.txt" \
            || die "cannot read $crds/$patch"
    done
    [ -s "$out/conversion-crds.txt" ] || die "Kueue $KUEUE_VERSION's CRD kustomization lists no conversion webhook"
    chmod -R u+w "$out"
    printf 'kueue %s\n%s\n' "$KUEUE_VERSION" "$(go version)" >"$out/bin/.complete"
    rm -rf "$KUEUE_DIR"
    mv "$out" "$KUEUE_DIR"
    exec 6>&-
    say "built Kueue $KUEUE_VERSION in $(elapsed "$start") s: $KUEUE_DIR/bin/kueue ($(du -sh "$KUEUE_DIR/bin/kueue" | cut -f1))"
}

# ==== up --kueue ================================================================================
# Kueue runs as a local process with the admin kubeconfig (system:masters): its own RBAC
# (config/components/rbac) is not applied, since nothing here runs as Kueue's ServiceAccount.
# Its webhook server listens on 127.0.0.1 with a serving certificate the test bed's CA signs;
# the API server runs on the same host, so the webhook configurations name a `url:` rather than
# a Service. Kueue's own certificate rotation (internalCertManagement) is off.

kueue_ports() {  # kueue_ports PORT_BASE: the webhook, health and metrics ports
    KUEUE_WEBHOOK_PORT=$(($1 + 10))
    KUEUE_HEALTH_PORT=$(($1 + 11))
    KUEUE_METRICS_PORT=$(($1 + 12))
}

# the webhooks `up` registers: Kueue's own objects, and the Pod integration's (the one framework
# enabled; another framework's webhook would fail its objects, whose handler is not served)
KUEUE_WEBHOOKS="mclusterqueue.kb.io mresourceflavor.kb.io mworkload.kb.io mpod.kb.io
vclusterqueue.kb.io vcohort.kb.io vresourceflavor.kb.io vworkload.kb.io vpod.kb.io"

kueue_write_config() {  # the Configuration (config.kueue.x-k8s.io/v1beta2) the manager reads
    mkdir -p "$DIR/kueue/certs"
    cat >"$DIR/kueue/config.yaml" <<YAML
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: $KUEUE_NAMESPACE
health:
  healthProbeBindAddress: 127.0.0.1:$KUEUE_HEALTH_PORT
metrics:
  bindAddress: 127.0.0.1:$KUEUE_METRICS_PORT
webhook:
  host: 127.0.0.1
  port: $KUEUE_WEBHOOK_PORT
  certDir: $DIR/kueue/certs
# one manager; no Lease to wait for at start-up
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
# only Pods that name a LocalQueue (label kueue.x-k8s.io/queue-name) are queued...
manageJobsWithoutQueueName: false
# ... and only in namespaces labelled for RLark, never the system ones
managedJobsNamespaceSelector:
  matchLabels:
    $KUEUE_NAMESPACE_LABEL: "$KUEUE_NAMESPACE_LABEL_VALUE"
  matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: [kube-system, $KUEUE_NAMESPACE]
integrations:
  frameworks:
  - pod
# Fair Sharing across the ClusterQueues of a cohort. In Kueue v0.17's v1beta2 Configuration the
# section itself turns it on (apis/config/v1beta2/configuration_types.go, FairSharing: no
# "enable" field, unlike v1beta1's; pkg/scheduler/preemption/fairsharing/strategy.go, Enabled:
# fairSharing != nil) and preemptionStrategies must be given (pkg/config/validation.go,
# validateFairSharing); these two, in this order, are v1beta1's defaults
fairSharing:
  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]
# the visibility API (pending Workloads' positions) is an aggregated API server of its own, which
# would need an APIService and a port: not run
featureGates:
  VisibilityOnDemand: false
clientConnection:
  qps: 50
  burst: 100
YAML
}

kueue_write_webhooks() {  # Kueue's generated webhook configurations, pointed at the local manager
    local url="https://127.0.0.1:$KUEUE_WEBHOOK_PORT" ca
    ca=$(base64 -w0 <"$DIR/pki/ca.crt")
    # controller-gen writes each webhook as a list item at column 0 ("- admissionReviewVersions:")
    # with clientConfig.service {name, namespace, path}: keep the listed webhooks, replace the
    # Service by url + caBundle, and give the Pod webhooks RLark's namespace selector
    awk -v keep="$KUEUE_WEBHOOKS" -v url="$url" -v ca="$ca" -v label="$KUEUE_NAMESPACE_LABEL" \
        -v value="$KUEUE_NAMESPACE_LABEL_VALUE" -v sysns="$KUEUE_NAMESPACE" '
        function flush() {
            if (n > 0 && (name in wanted)) {
                for (i = 1; i <= n; i++) print buf[i]
                if (name ~ /pod\.kb\.io$/) {
                    print "  namespaceSelector:"
                    print "    matchLabels:"
                    print "      " label ": \"" value "\""
                    print "    matchExpressions:"
                    print "    - key: kubernetes.io/metadata.name"
                    print "      operator: NotIn"
                    print "      values: [kube-system, " sysns "]"
                }
                kept++
            }
            n = 0; name = ""
        }
        BEGIN { split(keep, k, /[ \n]+/); for (i in k) if (k[i] != "") wanted[k[i]] = 1 }
        /^---/ { flush(); item = 0; print; next }
        /^(apiVersion|kind|metadata|webhooks):/ { flush(); item = 0 }
        /^  name: [a-z-]+-webhook-configuration$/ { sub(/name: /, "name: kueue-") }
        /^- / { flush(); item = 1 }
        !item { print; next }
        /^    service:$/ || /^      name: / || /^      namespace: / { next }
        /^      path: / { buf[++n] = "    url: " url $2; buf[++n] = "    caBundle: " ca; next }
        /^  name: / { name = $2 }
        { buf[++n] = $0 }
        END { flush(); if (kept != split(keep, k2, /[ \n]+/)) exit 3 }
    ' "$KUEUE_DIR/webhook/manifests.yaml" >"$DIR/kueue/webhooks.yaml" \
        || die "Kueue $KUEUE_VERSION's webhook manifests do not have the webhooks $KUEUE_WEBHOOKS"
}

kueue_conversion_patch() {  # the conversion webhook of a CRD that serves two API versions
    printf '{"spec":{"conversion":{"strategy":"Webhook","webhook":{"clientConfig":{"url":"https://127.0.0.1:%s/convert","caBundle":"%s"},"conversionReviewVersions":["v1"]}}}}' \
        "$KUEUE_WEBHOOK_PORT" "$(base64 -w0 <"$DIR/pki/ca.crt")"
}

kueue_webhook_served() {  # a server-side dry run that passes Kueue's ResourceFlavor webhooks
    kube create --dry-run=server -f - <<YAML
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: rlark-testbed-webhook-check
YAML
}

kueue_up() {  # kueue_up TIMEOUT: CRDs, namespace, manager, webhooks (the control plane is up)
    local timeout=$1 crd start
    start=$(now)
    say "installing Kueue $KUEUE_VERSION's CRDs"
    kube apply --server-side -f "$KUEUE_DIR/crds" >>"$DIR/logs/apply.log" 2>&1 \
        || { tail -n 20 "$DIR/logs/apply.log" >&2; die "could not install Kueue's CRDs"; }
    while read -r crd; do
        [ -n "$crd" ] || continue
        kube patch crd "$crd" --type=merge -p "$(kueue_conversion_patch)" >>"$DIR/logs/apply.log" 2>&1 \
            || { tail -n 20 "$DIR/logs/apply.log" >&2; die "could not set the conversion webhook of CRD $crd"; }
    done <"$KUEUE_DIR/conversion-crds.txt"
    kube wait --for=condition=Established --timeout="${timeout}s" -f "$KUEUE_DIR/crds" >>"$DIR/logs/apply.log" 2>&1 \
        || { tail -n 20 "$DIR/logs/apply.log" >&2; die "timed out after ${timeout}s waiting for Kueue's CRDs to be Established"; }
    kube create namespace "$KUEUE_NAMESPACE" >>"$DIR/logs/apply.log" 2>&1 \
        || die "could not create namespace $KUEUE_NAMESPACE"
    # one serving certificate for its webhook and its metrics endpoint
    gen_cert kueue "/CN=kueue" "keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
    kueue_write_config
    # Without internalCertManagement, Kueue v0.17 reads its metrics certificate from the fixed
    # path /etc/kueue/metrics/certs (cmd/kueue/main.go): it runs in a mount namespace of its own
    # whose /etc is an overlay with that directory added, so nothing on the host's /etc changes
    # and test beds side by side each have their own
    local certs upper=$DIR/kueue/etc-upper/kueue/metrics/certs
    mkdir -p "$upper" "$DIR/kueue/etc-work"
    for certs in "$DIR/kueue/certs" "$upper"; do
        cp "$DIR/pki/kueue.crt" "$certs/tls.crt"
        cp "$DIR/pki/kueue.key" "$certs/tls.key"
        chmod 600 "$certs/tls.key"
    done
    kueue_write_webhooks
    printf 'KUBECONFIG=%s\n' "$DIR/admin.kubeconfig" >"$DIR/cmd/kueue.env"
    local launcher=(unshare --mount --propagation private)
    # a user without CAP_SYS_ADMIN mounts in a user namespace of its own (as its root)
    [ "$(id -u)" = 0 ] || launcher=(unshare --user --map-root-user --mount --propagation private)
    command -v unshare >/dev/null || die "Kueue needs unshare (util-linux) for its mount namespace"
    write_args kueue "${launcher[@]}" -- /bin/sh -c \
        'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc || exit 111; shift 2; exec "$@"' \
        kueue "$DIR/kueue/etc-upper" "$DIR/kueue/etc-work" \
        "$KUEUE_DIR/bin/kueue" --config="$DIR/kueue/config.yaml" --zap-log-level=info
    printf '%s\n' "$KUEUE_DIR/bin/kueue" >"$DIR/cmd/kueue.exe"
    say "starting Kueue $KUEUE_VERSION (webhook https://127.0.0.1:$KUEUE_WEBHOOK_PORT, health $KUEUE_HEALTH_PORT, metrics $KUEUE_METRICS_PORT)"
    start_component kueue
    wait_for "Kueue /readyz (its webhook server started)" "$timeout" kueue \
        curl -fsS --max-time 2 "http://127.0.0.1:$KUEUE_HEALTH_PORT/readyz"
    kube apply -f "$DIR/kueue/webhooks.yaml" >>"$DIR/logs/apply.log" 2>&1 \
        || { tail -n 20 "$DIR/logs/apply.log" >&2; die "could not register Kueue's webhooks"; }
    wait_for "the API server to call Kueue's webhook (a dry-run ResourceFlavor)" "$timeout" kueue kueue_webhook_served
    say "Kueue $KUEUE_VERSION ready in $(elapsed "$start") s (CRDs, manager, webhooks)"
}
