# shellcheck shell=bash
# Sourced by scripts/k8s-testbed: Kueue (`build --kueue`, `up --kueue`), the queueing and gang
# admission controller of sigs.k8s.io/kueue, built from its Go module and run as one more local
# process beside the control plane (docs/kubernetes.md, "Kueue in the test bed").

# Kueue v0.17.0 is the newest release on the Go module proxy; its go.mod says go 1.25.0 and builds
# against k8s.io/* v0.35 and controller-runtime v0.23 (one minor behind the API server's 1.36,
# within client-go's supported skew). It is built from its own go.mod, not with the control
# plane's v0.36 libraries.
KUEUE_VERSION=${RLARK_TESTBED_KUEUE_VERSION:-v0.17.0}
# "-vis": built with the visibility server's certificate directory moved under /etc (below); a
# directory of its own so that a cache built before that, which test beds may be running, stays
KUEUE_DIR=$CACHE_ROOT/kueue-$KUEUE_VERSION-vis
# Kueue v0.17's visibility server reads its serving certificate from the fixed directory
# /visibility (pkg/visibility/server.go: certDir, without internalCertManagement). The test bed
# gives Kueue a private /etc (an overlay in a mount namespace of its own, see kueue_up) but
# cannot give it a /visibility without creating that directory on the host, so the build moves
# it under /etc (certDir is a string variable: the linker's -X sets it)
KUEUE_VISIBILITY_CERT_DIR=/etc/kueue/visibility

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
    ld+=" -X sigs.k8s.io/kueue/pkg/visibility.certDir=$KUEUE_VISIBILITY_CERT_DIR"
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

kueue_ports() {  # kueue_ports PORT_BASE: the webhook, health, metrics and visibility ports
    KUEUE_WEBHOOK_PORT=$(($1 + 10))
    KUEUE_HEALTH_PORT=$(($1 + 11))
    KUEUE_METRICS_PORT=$(($1 + 12))
    KUEUE_VISIBILITY_PORT=$(($1 + 13))
}

# The visibility API (visibility.kueue.x-k8s.io: pending Workloads and their places in line) is
# an aggregated API: kube-apiserver proxies it to the Kueue manager's own API server, found
# through an APIService that names a Service. The test bed runs no kube-proxy, so the API server
# dials the Service's endpoint itself (--enable-aggregator-routing=true), and an endpoint may not
# be a loopback address (EndpointSlice validation): the manager's visibility server listens on
# this machine's first global IPv4 address instead.
KUEUE_VISIBILITY_SERVICE=kueue-visibility-server
KUEUE_VISIBILITY_VERSIONS="v1beta2 v1beta1"

kueue_host_ip() {  # this machine's first global IPv4 address (not loopback)
    local ip
    ip=$(ip -o -4 addr show scope global 2>/dev/null | awk '{ split($4, a, "/"); print a[1]; exit }')
    [ -n "$ip" ] || die "--kueue needs a non-loopback IPv4 address on this machine for Kueue's visibility server (an aggregated API's endpoint may not be loopback); 'ip -4 addr show scope global' lists none"
    printf '%s\n' "$ip"
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
# the visibility API (pending Workloads' positions; feature gate VisibilityOnDemand, beta and on
# by default since Kueue v0.9: pkg/features/kube_features.go), served on this machine's address
# (kueue_host_ip) with the certificate under $KUEUE_VISIBILITY_CERT_DIR (build_kueue)
featureGates:
  VisibilityOnDemand: true
visibilityServer:
  bindAddress: $KUEUE_HOST_IP
  bindPort: $KUEUE_VISIBILITY_PORT
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

kueue_write_visibility() {  # the APIServices of the visibility API, its Service and endpoint
    local v ca
    ca=$(base64 -w0 <"$DIR/pki/ca.crt")
    {
        # no selector: its one endpoint is the local manager, in the EndpointSlice below
        cat <<YAML
apiVersion: v1
kind: Service
metadata:
  name: $KUEUE_VISIBILITY_SERVICE
  namespace: $KUEUE_NAMESPACE
spec:
  ports:
  - name: https
    port: 443
    targetPort: $KUEUE_VISIBILITY_PORT
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: $KUEUE_VISIBILITY_SERVICE
  namespace: $KUEUE_NAMESPACE
  labels:
    kubernetes.io/service-name: $KUEUE_VISIBILITY_SERVICE
    endpointslice.kubernetes.io/managed-by: rlark-k8s-testbed
addressType: IPv4
ports:
- name: https
  port: $KUEUE_VISIBILITY_PORT
  protocol: TCP
endpoints:
- addresses: [$KUEUE_HOST_IP]
  conditions:
    ready: true
YAML
        # Kueue's own APIServices (config/components/visibility) skip TLS verification; these
        # verify the manager's certificate against the test bed's CA (its name is the Service's
        # DNS name, as the aggregator checks it)
        for v in $KUEUE_VISIBILITY_VERSIONS; do
            cat <<YAML
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: $v.visibility.kueue.x-k8s.io
spec:
  group: visibility.kueue.x-k8s.io
  version: $v
  groupPriorityMinimum: 100
  versionPriority: 100
  caBundle: $ca
  service:
    name: $KUEUE_VISIBILITY_SERVICE
    namespace: $KUEUE_NAMESPACE
    port: 443
YAML
        done
    } >"$DIR/kueue/visibility.yaml"
}

kueue_visibility_served() {  # the API server proxies the visibility API to the manager
    # Kueue's own answer for a ClusterQueue it does not know (a 404 of the API server itself
    # would say "the server could not find the requested resource")
    local said
    said=$(kube get --raw "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/rlark-testbed-check/pendingworkloads" 2>&1) || true
    [[ $said == *'"rlark-testbed-check" not found'* ]]
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
    # one serving certificate for its webhook and its metrics endpoint, one for its visibility
    # server (named as its Service, the name the API server's aggregator verifies)
    gen_cert kueue "/CN=kueue" "keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
    gen_cert kueue-visibility "/CN=$KUEUE_VISIBILITY_SERVICE.$KUEUE_NAMESPACE.svc" "keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:$KUEUE_VISIBILITY_SERVICE.$KUEUE_NAMESPACE.svc,IP:$KUEUE_HOST_IP"
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
    # the visibility server's, at the path the build gave it, in the same overlay
    certs=$DIR/kueue/etc-upper${KUEUE_VISIBILITY_CERT_DIR#/etc}
    mkdir -p "$certs"
    cp "$DIR/pki/kueue-visibility.crt" "$certs/tls.crt"
    cp "$DIR/pki/kueue-visibility.key" "$certs/tls.key"
    chmod 600 "$certs/tls.key"
    kueue_write_webhooks
    kueue_write_visibility
    # the flag, not only $KUBECONFIG: the visibility server's delegated authentication and
    # authorization (TokenReview, SubjectAccessReview) read the kubeconfig the flag names
    # (pkg/visibility/server.go) and would otherwise look for in-cluster credentials
    printf 'KUBECONFIG=%s\n' "$DIR/admin.kubeconfig" >"$DIR/cmd/kueue.env"
    local launcher=(unshare --mount --propagation private)
    # a user without CAP_SYS_ADMIN mounts in a user namespace of its own (as its root)
    [ "$(id -u)" = 0 ] || launcher=(unshare --user --map-root-user --mount --propagation private)
    command -v unshare >/dev/null || die "Kueue needs unshare (util-linux) for its mount namespace"
    write_args kueue "${launcher[@]}" -- /bin/sh -c \
        'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc || exit 111; shift 2; exec "$@"' \
        kueue "$DIR/kueue/etc-upper" "$DIR/kueue/etc-work" \
        "$KUEUE_DIR/bin/kueue" --config="$DIR/kueue/config.yaml" \
        --kubeconfig="$DIR/admin.kubeconfig" --zap-log-level=info
    printf '%s\n' "$KUEUE_DIR/bin/kueue" >"$DIR/cmd/kueue.exe"
    say "starting Kueue $KUEUE_VERSION (webhook https://127.0.0.1:$KUEUE_WEBHOOK_PORT, health $KUEUE_HEALTH_PORT, metrics $KUEUE_METRICS_PORT, visibility https://$KUEUE_HOST_IP:$KUEUE_VISIBILITY_PORT)"
    start_component kueue
    wait_for "Kueue /readyz (its webhook server started)" "$timeout" kueue \
        curl -fsS --max-time 2 "http://127.0.0.1:$KUEUE_HEALTH_PORT/readyz"
    kube apply -f "$DIR/kueue/webhooks.yaml" >>"$DIR/logs/apply.log" 2>&1 \
        || { tail -n 20 "$DIR/logs/apply.log" >&2; die "could not register Kueue's webhooks"; }
    wait_for "the API server to call Kueue's webhook (a dry-run ResourceFlavor)" "$timeout" kueue kueue_webhook_served
    kube apply -f "$DIR/kueue/visibility.yaml" >>"$DIR/logs/apply.log" 2>&1 \
        || { tail -n 20 "$DIR/logs/apply.log" >&2; die "could not register Kueue's visibility API (APIService, Service, EndpointSlice)"; }
    wait_for "the API server to proxy Kueue's visibility API (a ClusterQueue's pending workloads)" "$timeout" kueue kueue_visibility_served
    say "Kueue $KUEUE_VERSION ready in $(elapsed "$start") s (CRDs, manager, webhooks, visibility API)"
}
