# shellcheck shell=bash
# Sourced by scripts/k8s-testbed: the real node of `up --real-node` (a kubelet with containerd,
# runc, a CNI bridge network and CoreDNS, as local processes) and its teardown in `down`.
# docs/kubernetes.md ("Real node") explains each choice.

REAL_NODE_NAME=real-node
REAL_NODE_LABEL=rlark.io/testbed-node=real
NODE_COMPONENTS=(containerd coredns kubelet)   # start order
# The kubelet keeps two things at fixed host paths whatever its --root-dir:
# /var/lib/kubelet/device-plugins/kubelet.sock and the /var/log/containers links; so one real node
# per machine, recorded here (the test bed's DIR).
REAL_NODE_MARKER=/run/rlark-k8s-testbed/real-node
REAL_NODE_MAX_DIR=64
# what the kubelet sets on start (cm.setupKernelTunables) and `down` puts back
KUBELET_SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
    kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

# ---- cgroups (v1: one directory per hierarchy) -------------------------------------------------

cgroup_hierarchies() { findmnt -rn -t cgroup -o TARGET; }
# with the cgroup v2 hierarchy a hybrid host also mounts (runc makes its directories there too)
cgroup_all_mounts() { findmnt -rn -t cgroup,cgroup2 -o TARGET; }

make_cgroup() {  # make_cgroup REL: REL (and parents) in every hierarchy, cpuset inherited
    local h rel=$1 part path
    for h in $(cgroup_hierarchies); do
        path=$h
        for part in ${rel//\// }; do
            path=$path/$part
            mkdir -p "$path" || die "cannot create cgroup $path"
            # a new v1 cpuset has no CPUs or memory nodes: nothing could run in it
            if [ -f "$path/cpuset.cpus" ] && [ -z "$(cat "$path/cpuset.cpus")" ]; then
                cat "$(dirname "$path")/cpuset.cpus" >"$path/cpuset.cpus"
                cat "$(dirname "$path")/cpuset.mems" >"$path/cpuset.mems"
            fi
        done
    done
}

join_cgroup() {  # join_cgroup REL: move this (sub)shell into REL in every hierarchy
    local h
    for h in $(cgroup_hierarchies); do
        echo "$BASHPID" >"$h/$1/cgroup.procs" || die "cannot join cgroup $h/$1"
    done
}

cgroup_pids() {  # cgroup_pids REL: every process in REL and below
    local h
    h=$(cgroup_hierarchies | grep -m1 '/memory$') || return 0
    [ -d "$h/$1" ] || return 0
    find "$h/$1" -name cgroup.procs -exec cat {} + 2>/dev/null
}

kill_cgroup() {  # kill_cgroup REL: SIGKILL every process in REL and below (frozen first, so
    # none can fork while they are killed); bounded
    local rel=$1 freezer pids i
    freezer=$(cgroup_hierarchies | grep -m1 '/freezer$') || freezer=""
    for ((i = 0; i < 50; i++)); do
        pids=$(cgroup_pids "$rel")
        [ -n "$pids" ] || return 0
        [ -n "$freezer" ] && [ -d "$freezer/$rel" ] && echo FROZEN >"$freezer/$rel/freezer.state" 2>/dev/null
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
        [ -n "$freezer" ] && [ -d "$freezer/$rel" ] && echo THAWED >"$freezer/$rel/freezer.state" 2>/dev/null
        sleep 0.2
    done
    say "processes still in cgroup $rel after SIGKILL: $(cgroup_pids "$rel" | tr '\n' ' ')"
    return 1
}

remove_cgroup() {  # remove_cgroup REL: its directories in every hierarchy, deepest first
    local h ok=0
    for h in $(cgroup_all_mounts); do
        [ -d "$h/$1" ] || continue
        find "$h/$1" -depth -type d -exec rmdir {} + 2>/dev/null || ok=1
    done
    return $ok
}

# ---- mounts ----------------------------------------------------------------------------------

unmount_under() {  # unmount_under PATH: every mount at or below PATH, deepest first (bounded)
    local path=$1 pass m left
    for ((pass = 0; pass < 5; pass++)); do
        left=0
        # findmnt -r escapes blanks in mount points as \x20; the test bed's paths have none
        while read -r m; do
            [ -n "$m" ] || continue
            left=1
            umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
        done < <(mounts_under "$path" | awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2-)
        [ "$left" = 0 ] && return 0
    done
    if [ -n "$(mounts_under "$path")" ]; then
        say "mounts left under $path:"
        mounts_under "$path" >&2
        return 1
    fi
}

mounts_under() {  # mounts_under PATH: the mount points at or below PATH
    findmnt -rn -o TARGET | awk -v p="$1" '$0 == p || index($0, p "/") == 1'
}

# ---- the node's configuration ------------------------------------------------------------------

node_network() {  # sets BRIDGE, POD_SUBNET, NODE_IP from the port base: one network per test bed
    local idx=$(( (PORT_BASE / 10) % 256 ))
    BRIDGE=rlk$PORT_BASE
    POD_SUBNET=10.250.$idx.0/24
    NODE_IP=10.250.$idx.1
}

write_node_pki() {
    gen_cert kubelet "/O=system:nodes/CN=system:node:$REAL_NODE_NAME" "keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    gen_cert kubelet-serving "/CN=$REAL_NODE_NAME" "keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$NODE_IP,DNS:$REAL_NODE_NAME"
    gen_cert coredns "/CN=rlark-testbed-coredns" "keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    chmod 600 "$DIR/pki"/*.key
}

has_cap_sys_resource() {  # CAP_SYS_RESOURCE (bit 24) in this process's effective capabilities
    local eff
    eff=$(awk '$1 == "CapEff:" { print $2 }' /proc/self/status)
    (( (16#$eff >> 24) & 1 ))
}

containerd_config_base() {  # containerd_config_base ROOT STATE SOCKET OPT [PLUGIN...]: the start
    # of a containerd config (version 4: containerd v2.3's own; 3 is migrated at every start, with
    # a warning), the plugins no test bed containerd uses disabled (their absence would only be
    # logged), and the PLUGINs given
    local root=$1 state=$2 sock=$3 opt=$4 p
    shift 4
    local disabled="'io.containerd.snapshotter.v1.btrfs', 'io.containerd.snapshotter.v1.zfs',
  'io.containerd.snapshotter.v1.devmapper', 'io.containerd.snapshotter.v1.blockfile',
  'io.containerd.tracing.processor.v1.otlp', 'io.containerd.internal.v1.tracing'"
    for p in "$@"; do disabled+=", '$p'"; done
    cat <<EOF
version = 4
root = '$root'
state = '$state'
disabled_plugins = [$disabled]

[plugins.'io.containerd.server.v1.grpc']
  address = '$sock'
[plugins.'io.containerd.server.v1.ttrpc']
  address = '$sock.ttrpc'

[plugins.'io.containerd.internal.v1.opt']
  path = '$opt'
EOF
}

write_containerd_config() {
    local n=$DIR/node restrict_oom=false
    # Without CAP_SYS_RESOURCE (a sandbox may withhold it even from root) no process can lower
    # an oom_score_adj, and runc fails every Pod ("failed to update /proc/self/oom_score_adj:
    # Permission denied": the kubelet asks -998 for the pause container); containerd then keeps
    # each value at or above its own (0)
    has_cap_sys_resource || restrict_oom=true
    {
        echo '# Generated by scripts/k8s-testbed (docs/kubernetes.md, "Real node")'
        containerd_config_base "$n/containerd/root" "$n/containerd/state" "$n/containerd/containerd.sock" \
            "$n/containerd/opt"
        cat <<EOF

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '$PAUSE_IMAGE'

[plugins.'io.containerd.cri.v1.runtime']
  # network namespaces under the state directory, not /var/run/netns
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = $restrict_oom
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = '$RUNC_DIR/bin/runc'
        Root = '$n/runc'
        # no systemd here: cgroupfs (the kubelet reads this choice through the CRI)
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['$CNI_DIR/bin']
    conf_dir = '$n/cni/net.d'

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '$CONTAINERD_STREAM_PORT'
EOF
    } >"$n/containerd.toml"
}

write_cni_config() {
    local n=$DIR/node
    mkdir -p "$n/cni/net.d" "$n/cni/ipam"
    # no isGateway/ipMasq: the bridge plugin would turn on the host's IP forwarding and need
    # iptables; the node's address is set on the bridge by `up`, and each Pod gets a default route
    # to it (Ray picks its node IP from the route to the outside world)
    cat >"$n/cni/net.d/10-rlark-testbed.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "rlark-testbed",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$n/cni/ipam",
        "ranges": [[{"subnet": "$POD_SUBNET", "rangeStart": "${NODE_IP%.*}.10", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0", "gw": "$NODE_IP"}]
      }
    }
  ]
}
EOF
}

write_kubelet_config() {
    local n=$DIR/node
    cat >"$n/kubelet.yaml" <<EOF
# Generated by scripts/k8s-testbed (docs/kubernetes.md, "Real node")
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# this machine mounts cgroup v1 and runs no systemd
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_ROOT
cgroupsPerQOS: true
# limits set no CFS quota on this 2-core machine: requests still set cpu.shares, and a Pod held
# to 500m waits on the throttle while a core idles (docs/kubernetes.md, "CPU: requests, not quotas")
cpuCFSQuota: false
containerRuntimeEndpoint: unix://$n/containerd/containerd.sock
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $DIR/pki/kubelet-serving.crt
tlsPrivateKeyFile: $DIR/pki/kubelet-serving.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $DIR/pki/ca.crt
authorization:
  mode: Webhook
clusterDomain: cluster.local
clusterDNS: [$NODE_IP]
resolvConf: /etc/resolv.conf
podLogsDir: $n/pod-logs
maxPods: 32
failSwapOn: false
# the imported images are all there is (no registry): never garbage-collect them
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# a shared test machine: evict only when really out of memory or disk
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
serializeImagePulls: false
shutdownGracePeriod: 0s
EOF
}

write_coredns_config() {
    local n=$DIR/node
    # Service and Pod names of cluster.local (a headless Service's name answers its Pods' IPs),
    # everything else forwarded to the host's resolver; no cache, so a name answers as soon as
    # its Pod has an IP
    cat >"$n/Corefile" <<EOF
.:53 {
    bind $NODE_IP
    errors
    ready 127.0.0.1:$COREDNS_READY_PORT
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $DIR/coredns.kubeconfig
        pods insecure
        ttl 5
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
}
EOF
}

coredns_rbac() {  # what CoreDNS's kubernetes plugin reads, for the test bed's CoreDNS user
    cat <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: rlark-testbed:coredns
rules:
- apiGroups: [""]
  resources: [services, namespaces, pods]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: rlark-testbed:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: rlark-testbed:coredns
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: rlark-testbed-coredns
EOF
}

# ---- up ----------------------------------------------------------------------------------------

check_real_node_possible() {  # before anything starts: what the real node needs from the host
    [ "$(id -u)" = 0 ] || die "--real-node needs root (a kubelet, containerd and runc manage cgroups, mounts and network namespaces)"
    node_built || die "the real node's parts are not built (run: scripts/k8s-testbed build --real-node)"
    require_images
    cgroup_hierarchies | grep -q '/memory$' || die "--real-node: no cgroup v1 memory hierarchy mounted (docs/kubernetes.md, \"Real node\": this node is set up for cgroup v1)"
    command -v ip >/dev/null || die "--real-node needs ip (apt-get install iproute2)"
    # unix sockets under DIR (containerd's, the kubelet's pod-resources one: DIR plus at most
    # 38 bytes) must fit the 107 bytes of a socket path (sun_path, unix(7))
    [ "${#DIR}" -le "$REAL_NODE_MAX_DIR" ] || die "--real-node: --dir $DIR is ${#DIR} bytes long; its unix sockets need one of at most $REAL_NODE_MAX_DIR (choose a shorter --dir, e.g. under /tmp)"
    if [ -f "$REAL_NODE_MARKER" ]; then
        local other
        other=$(cat "$REAL_NODE_MARKER")
        if [ "$other" != "$DIR" ] && [ -f "$other/pids/kubelet.pid" ] \
            && [ -d "/proc/$(cat "$other/pids/kubelet.pid")" ]; then
            die "a real node already runs on this machine (test bed $other; one at a time: the kubelet's /var/lib/kubelet/device-plugins socket is fixed); stop it with: scripts/k8s-testbed down --dir $other"
        fi
    fi
    ip link show "$BRIDGE" >/dev/null 2>&1 && die "network interface $BRIDGE exists already (a test bed on port base $PORT_BASE not stopped?); remove it with: ip link del $BRIDGE"
    return 0
}

node_up() {  # start containerd, import the images, start CoreDNS and the kubelet; wait for Ready
    local timeout=$1 n=$DIR/node start
    start=$(now)
    mkdir -p "$(dirname "$REAL_NODE_MARKER")"
    echo "$DIR" >"$REAL_NODE_MARKER"
    mkdir -p "$n/containerd" "$n/kubelet" "$n/pod-logs" "$n/runc"
    # host paths the kubelet creates: removed by `down` only if they were not there before
    : >"$n/host-paths"
    local p
    # (containerd's shims keep their sockets under /run/containerd/s whatever its state directory)
    for p in /var/lib/kubelet /var/log/containers /run/containerd; do [ -e "$p" ] || echo "$p" >>"$n/host-paths"; done
    if [ ! -f "$n/sysctl.saved" ]; then
        for p in "${KUBELET_SYSCTLS[@]}"; do echo "$p $(cat "/proc/sys/$p")"; done >"$n/sysctl.saved"
    fi

    say "real node: bridge $BRIDGE with $NODE_IP (Pods: $POD_SUBNET), cgroup /$CGROUP_ROOT"
    ip link add name "$BRIDGE" type bridge || die "could not create the bridge $BRIDGE"
    ip addr add "$NODE_IP/24" dev "$BRIDGE" || die "could not give $BRIDGE the address $NODE_IP"
    ip link set "$BRIDGE" up || die "could not bring $BRIDGE up"
    make_cgroup "$CGROUP_ROOT/system"

    write_node_pki
    write_kubeconfig "$DIR/kubelet.kubeconfig" kubelet
    write_kubeconfig "$DIR/coredns.kubeconfig" coredns
    write_containerd_config
    write_cni_config
    write_kubelet_config
    write_coredns_config

    # containerd and every shim it starts live in the test bed's cgroup, so `down` finds them all
    write_args containerd "$CONTAINERD_DIR/bin/containerd" --config "$n/containerd.toml" --log-level warn
    printf '%s\n' "PATH=$CONTAINERD_DIR/bin:$RUNC_DIR/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        >"$DIR/cmd/containerd.env"
    echo "$CGROUP_ROOT/system" >"$DIR/cmd/containerd.cgroup"
    write_args coredns "$COREDNS_DIR/bin/coredns" -conf "$n/Corefile"
    write_args kubelet "$BIN/kubelet" --config="$n/kubelet.yaml" --kubeconfig="$DIR/kubelet.kubeconfig" \
        --root-dir="$n/kubelet" --hostname-override="$REAL_NODE_NAME" --node-ip="$NODE_IP" \
        --node-labels="$REAL_NODE_LABEL" --v=1

    # the images, already unpacked (image-store.sh), when the build made the store
    local from_store=0 t0
    t0=$(now)
    if copy_image_store "$n/containerd/root"; then
        from_store=1
    else
        rm -rf "$n/containerd/root"
    fi
    say "real node: starting containerd $CONTAINERD_VERSION (runc $RUNC_VERSION)"
    start_component containerd
    wait_for "containerd to answer on $n/containerd/containerd.sock" "$timeout" containerd \
        ctr_ version
    if [ "$from_store" = 1 ] && images_in_store "$n/containerd/containerd.sock" "$DIR/logs/import.log"; then
        say "real node: images from the unpacked store $STORE_DIR in $(elapsed "$t0") s"
    else
        [ "$from_store" = 1 ] && say "real node: the store's copy lacks an image: importing them"
        import_images "$n/containerd/containerd.sock" "$DIR/logs/import.log"
    fi

    say "real node: starting CoreDNS $COREDNS_VERSION on $NODE_IP:53"
    coredns_rbac | kube apply -f - >>"$DIR/logs/apply.log" 2>&1 \
        || { cat "$DIR/logs/apply.log" >&2; die "could not apply CoreDNS's RBAC"; }
    start_component coredns
    say "real node: starting the kubelet ($K8S_VERSION) as Node $REAL_NODE_NAME"
    start_component kubelet
    wait_for "CoreDNS ready (http://127.0.0.1:$COREDNS_READY_PORT/ready)" "$timeout" coredns \
        curl -fsS --max-time 2 "http://127.0.0.1:$COREDNS_READY_PORT/ready"
    wait_for "Node $REAL_NODE_NAME Ready" "$timeout" kubelet \
        sh -c "'$BIN/kubectl' --kubeconfig '$DIR/admin.kubeconfig' get node '$REAL_NODE_NAME' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
    say "real node: Ready in $(elapsed "$start") s"
}

ctr_() { "$CONTAINERD_DIR/bin/ctr" --address "$DIR/node/containerd/containerd.sock" "$@"; }

# ---- down --------------------------------------------------------------------------------------

node_down() {  # stop the kubelet, CoreDNS, every container and containerd; undo what up did
    local n=$DIR/node rc=0 i
    [ -d "$n" ] || return 0
    stop_component kubelet
    stop_component coredns
    # every container killed and deleted through containerd while it runs, so each shim exits
    # and removes its socket (under /run/containerd/s whatever containerd's state directory)
    if alive containerd; then
        local t
        for t in $(timeout 20 "$CONTAINERD_DIR/bin/ctr" --address "$n/containerd/containerd.sock" \
                   -n k8s.io tasks ls -q 2>/dev/null); do
            timeout 20 "$CONTAINERD_DIR/bin/ctr" --address "$n/containerd/containerd.sock" \
                -n k8s.io tasks delete --force "$t" >/dev/null 2>&1 || true
        done
    fi
    # SIGTERM leaves the shims and containers running (by design): what is left, the cgroup
    # takes
    stop_component containerd
    if [ -n "${CGROUP_ROOT:-}" ]; then
        kill_cgroup "$CGROUP_ROOT" || rc=1
    fi
    unmount_under "$n" || rc=1
    if [ -n "${CGROUP_ROOT:-}" ]; then
        # the kernel removes a cgroup's last task asynchronously: retry briefly
        for ((i = 0; i < 25; i++)); do remove_cgroup "$CGROUP_ROOT" && break; sleep 0.2; done
        [ "$i" -lt 25 ] || { say "could not remove cgroup /$CGROUP_ROOT"; rc=1; }
    fi
    if [ -n "${BRIDGE:-}" ] && ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link del "$BRIDGE" || rc=1
    fi
    # the Pods' network namespaces went with their processes; their veths with them
    if [ -f "$n/sysctl.saved" ]; then
        local key value
        while read -r key value; do
            echo "$value" >"/proc/sys/$key" 2>/dev/null || say "could not restore $key=$value"
        done <"$n/sysctl.saved"
    fi
    # the kubelet's links to this node's container logs
    local l
    for l in /var/log/containers/*.log; do
        [ -L "$l" ] && case $(readlink "$l") in "$n"/*) rm -f "$l" ;; esac
    done
    if [ -f "$n/host-paths" ]; then
        local p
        while read -r p; do
            case $p in
                /var/lib/kubelet) rm -rf /var/lib/kubelet ;;
                /var/log/containers) rmdir /var/log/containers 2>/dev/null || true ;;
                # the sockets of shims that were killed (no process has them open: not in
                # /proc/net/unix), then its empty directories; anything else is not the test bed's
                /run/containerd)
                    local sock
                    for sock in /run/containerd/s/*; do
                        [ -S "$sock" ] && ! grep -qF " $sock" /proc/net/unix && rm -f "$sock"
                    done
                    find /run/containerd -depth -type d -empty -delete 2>/dev/null || true ;;
            esac
        done <"$n/host-paths"
    fi
    if [ -f "$REAL_NODE_MARKER" ] && [ "$(cat "$REAL_NODE_MARKER")" = "$DIR" ]; then
        rm -f "$REAL_NODE_MARKER"
        rmdir "$(dirname "$REAL_NODE_MARKER")" 2>/dev/null || true
    fi
    if [ "$rc" = 0 ]; then
        rm -rf "$n"
    else
        say "the real node's state stays in $n (something could not be undone; see above)"
    fi
    return $rc
}
