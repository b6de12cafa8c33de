#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for Virga's tests (internal/backend/kube):
# etcd, kube-apiserver (RBAC on, TLS with its own CA, a service account signing key),
# kube-controller-manager (service accounts, garbage collection, endpoints, pod GC),
# kube-scheduler, and KWOK playing $VIRGA_KUBE_NODES fake nodes (default 200) in two
# pools: half on-demand (karpenter.sh/capacity-type=on-demand,
# eks.amazonaws.com/capacityType=ON_DEMAND), half spot (karpenter.sh/capacity-type=spot,
# cloud.google.com/gke-spot=true, eks.amazonaws.com/capacityType=SPOT), 32 CPUs and
# 128 GiB each. KWOK runs no containers: a pod bound to a fake node turns Running and
# stays so until it is deleted.
#
# The binaries are built once from the Go module proxy (k8s.io/kubernetes, etcd, KWOK)
# into $VIRGA_KUBE_CACHE (default ~/.cache/virga/kube), with throwaway modules and
# their own module and build caches there: Virga's go.mod is not touched, and removing
# that directory removes everything. State (certificates, etcd data, logs, pid files,
# kubeconfig) is under $VIRGA_KUBE_STATE (default /var/tmp/virga-kube); each start
# begins with an empty etcd.
#   scripts/kube.sh build        build the binaries if missing (prints their directory)
#   scripts/kube.sh start        build if needed, start (idempotent); waits until every
#                                node is Ready; prints the kubeconfig's path
#   scripts/kube.sh stop         stop the daemons this script started
#   scripts/kube.sh status       exit 0 if every daemon runs and the API server is ready
#   scripts/kube.sh restart D    kill -9 the daemon D (etcd or kube-apiserver) and start it
#                                again, etcd on its data; waits until the API server is ready
#   scripts/kube.sh kubeconfig   the kubeconfig's path (admin, system:masters)
#   scripts/kube.sh env          the variables the KWOK end-to-end suite needs
#                                (eval "$(scripts/kube.sh env)")
# Ports (loopback only): etcd $VIRGA_KUBE_ETCD_PORT (default 23790, peer +10),
# kube-apiserver $VIRGA_KUBE_PORT (default 26443).
set -euo pipefail
cmd=${1:-start}
k8s_version=v1.37.2
staging_version=v0.37.2
etcd_version=v3.7.0
kwok_version=v0.8.0
cache=${VIRGA_KUBE_CACHE:-$HOME/.cache/virga/kube}
bin=$cache/$k8s_version/bin
state=${VIRGA_KUBE_STATE:-/var/tmp/virga-kube}
nodes=${VIRGA_KUBE_NODES:-200}
etcd_port=${VIRGA_KUBE_ETCD_PORT:-23790}
api_port=${VIRGA_KUBE_PORT:-26443}
kubeconfig=$state/kubeconfig
pki=$state/pki
logs=$state/logs
daemons=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

# Runs go with the cache's own module and build caches, in a throwaway module.
gocache() {
  GOMODCACHE=$cache/gomod GOCACHE=$cache/gocache GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0 \
    GOTOOLCHAIN=${GOTOOLCHAIN:-local} "$@"
}

# build_one MODDIR BINARY PACKAGE: builds one binary, saying every
# $VIRGA_KUBE_PROGRESS seconds (default 30) how many of its packages are compiled
# (a cold build of kube-apiserver compiles for many minutes: CI would otherwise see
# nothing), and at the end how long it took.
build_one() {
  local dir=$1 out=$2 pkg=$3 total log pid started next every=${VIRGA_KUBE_PROGRESS:-30}
  [ -x "$bin/$out" ] && return 0
  total=$(cd "$dir" && gocache go list -deps "$pkg" | wc -l)
  echo "== building $out ($pkg, $total packages with the standard library) into $bin" >&2
  log=$(mktemp)
  started=$SECONDS
  next=$((started + every))
  # go build -v names each package it compiles (not those its cache holds).
  (cd "$dir" && gocache nice -n 19 go build -v -trimpath -ldflags='-s -w' -o "$bin/$out.tmp" "$pkg") 2>"$log" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if ((SECONDS >= next)); then
      echo "   $out: $((SECONDS - started)) s, $(grep -c '^[a-zA-Z]' "$log") of $total packages compiled" >&2
      next=$((SECONDS + every))
    fi
  done
  if ! wait "$pid"; then
    echo "building $out failed:" >&2
    grep -v '^[a-zA-Z][^ :]*$' "$log" >&2 || true
    rm -f "$log"
    exit 1
  fi
  echo "   $out built in $((SECONDS - started)) s ($(grep -c '^[a-zA-Z]' "$log") packages compiled)" >&2
  rm -f "$log"
  mv "$bin/$out.tmp" "$bin/$out"
}

# module DIR NAME REQUIRE REPLACES IMPORTS...: a throwaway module requiring REQUIRE, with
# the replace directives REPLACES (lines; may be empty), whose tools.go imports IMPORTS
# (so that go mod tidy records every dependency they need).
module() {
  local dir=$1 name=$2 req=$3 replaces=$4
  shift 4
  [ -f "$dir/go.sum" ] && return 0
  mkdir -p "$dir"
  {
    printf 'module %s\n\ngo %s\n\nrequire %s\n' "$name" "$(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1.0/')" "$req"
    if [ -n "$replaces" ]; then printf '\nreplace (\n%s\n)\n' "$replaces"; fi
  } >"$dir/go.mod"
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for p in "$@"; do printf '\t_ "%s"\n' "$p"; done
    printf ')\n'
  } >"$dir/tools.go"
  (cd "$dir" && gocache go mod tidy)
}

build() {
  local src=$cache/$k8s_version gomod replaces b
  mkdir -p "$bin"
  for b in kube-apiserver kube-controller-manager kube-scheduler etcd kwok; do
    if [ ! -x "$bin/$b" ]; then
      echo "== building the control plane's binaries into $bin, once: from cold caches about 1,000 CPU-seconds and 6 GB" >&2
      break
    fi
  done
  if [ ! -f "$src/mod-kube/go.sum" ]; then
    # k8s.io/kubernetes replaces its staging modules (k8s.io/api, k8s.io/apiserver, ...)
    # by directories of its own repository: here they come from the proxy instead.
    gomod=$(gocache go mod download -json "k8s.io/kubernetes@$k8s_version" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
    replaces=$(sed -n "s#^\t\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\t\1 => \1 $staging_version#p" "$gomod")
    module "$src/mod-kube" virgakube "k8s.io/kubernetes $k8s_version" "$replaces" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
  fi
  module "$src/mod-etcd" virgaetcd "go.etcd.io/etcd/server/v3 $etcd_version" "" go.etcd.io/etcd/server/v3
  module "$src/mod-kwok" virgakwok "sigs.k8s.io/kwok $kwok_version" "" sigs.k8s.io/kwok/cmd/kwok
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    build_one "$src/mod-kube" "$c" "k8s.io/kubernetes/cmd/$c"
  done
  build_one "$src/mod-etcd" etcd go.etcd.io/etcd/server/v3
  build_one "$src/mod-kwok" kwok sigs.k8s.io/kwok/cmd/kwok
}

# stages writes KWOK's stages (what its fake kubelets do) to $state/kwok-stages.yaml:
# KWOK's own "fast" ones (nodes turn Ready and renew their leases; pods bound to them
# turn Running, Job pods complete, deleted pods go at once), and one of Virga's that
# ends a running pod's container with the exit code its annotation
# virga.dev/kwok-exit-code gives (phase Succeeded for 0, else Failed): the end-to-end
# suite annotates a pod to play its trial's exit. A deleted pod annotated
# virga.dev/kwok-process is left to whoever runs its process (the suite's kubelet of
# local processes), which signals it, waits for its end and then removes the pod.
stages() {
  local kwok_dir
  kwok_dir=$(cd "$cache/$k8s_version/mod-kwok" && gocache go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml; do
    echo "---"
    cat "$kwok_dir/kustomize/stage/$f"
  done >"$state/kwok-stages.yaml"
  cat >>"$state/kwok-stages.yaml" <<'EOF'
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
    - key: '.metadata.annotations["virga.dev/kwok-process"]'
      operator: 'DoesNotExist'
  next:
    delete: true
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: virga-pod-exit
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.metadata.annotations["virga.dev/kwok-exit-code"]'
      operator: 'Exists'
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $code := index .metadata.annotations "virga.dev/kwok-exit-code" }}
      {{ $root := . }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        type: ContainersReady
      containerStatuses:
      {{ range $index, $item := .spec.containers }}
      {{ $origin := index $root.status.containerStatuses $index }}
      - image: {{ $item.image | Quote }}
        name: {{ $item.name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: {{ $code }}
            finishedAt: {{ $now | Quote }}
            reason: {{ if eq $code "0" }}Completed{{ else }}Error{{ end }}
            startedAt: {{ $origin.state.running.startedAt | Quote }}
      {{ end }}
      phase: {{ if eq $code "0" }}Succeeded{{ else }}Failed{{ end }}
EOF
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_pid() { # stop_pid FILE: TERM the recorded daemon, KILL it after 10 s
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

running() {
  local d
  for d in "${daemons[@]}"; do pid_alive "$state/$d.pid" || return 1; done
}

api() { # api ARGS...: curl against the API server as the admin
  curl -fsS --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "$@"
}

api_ready() { [ "$(api "https://127.0.0.1:$api_port/readyz" 2>/dev/null)" = ok ]; }

ready() { running && api_ready; }

stop_all() { # TERM every daemon at once (each takes 1 to 3 s to shut down), then wait
  local d
  for d in "${daemons[@]}"; do
    if pid_alive "$state/$d.pid"; then kill "$(cat "$state/$d.pid")" 2>/dev/null || true; fi
  done
  for ((i = ${#daemons[@]} - 1; i >= 0; i--)); do stop_pid "$state/${daemons[i]}.pid"; done
}

launch() { # launch NAME ARGS...: start a daemon in the background, its pid and log in $state
  local name=$1
  shift
  nohup "$@" >"$logs/$name.log" 2>&1 &
  echo $! >"$state/$name.pid"
}

wait_for() { # wait_for WHAT SECONDS COMMAND...
  local what=$1 secs=$2
  shift 2
  local f
  for _ in $(seq 1 $((secs * 5))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    for f in "$state"/*.pid; do
      if ! pid_alive "$f"; then
        echo "$(basename "$f" .pid) exited: see $logs/$(basename "$f" .pid).log" >&2
        stop_all
        exit 1
      fi
    done
    sleep 0.2
  done
  echo "$what not ready within $secs s: see $logs" >&2
  stop_all
  exit 1
}

start_etcd() { # etcd, on the data of $state/etcd
  launch etcd "$bin/etcd" --name virga --data-dir "$state/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$((etcd_port + 10))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 10))" \
    --initial-cluster "virga=http://127.0.0.1:$((etcd_port + 10))" \
    --listen-metrics-urls "" --unsafe-no-fsync --quota-backend-bytes 2147483648
  wait_for etcd 30 curl -fsS "http://127.0.0.1:$etcd_port/health"
}

start_apiserver() {
  launch kube-apiserver "$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" --authorization-mode RBAC \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range 10.96.0.0/16 --cert-dir "$pki" --profiling=false \
    --endpoint-reconciler-type none
  wait_for kube-apiserver 120 api_ready
}

case "$cmd" in
build) build; echo "$bin"; exit 0 ;;
kubeconfig) echo "$kubeconfig"; exit 0 ;;
env)
  echo "export KUBECONFIG=$kubeconfig"
  echo "export VIRGA_TEST_KWOK=1"
  exit 0 ;;
status)
  if ready; then
    echo "Kubernetes $k8s_version on https://127.0.0.1:$api_port, kubeconfig $kubeconfig"
    exit 0
  fi
  echo "the Virga test Kubernetes control plane is not running (scripts/kube.sh start)" >&2
  exit 1 ;;
stop) stop_all; exit 0 ;;
restart)
  # kill -9 one daemon and start it again (etcd keeps its data), as a crash and a
  # supervisor's restart would: for tests of what survives that.
  d=${2:-}
  case "$d" in
  etcd | kube-apiserver) ;;
  *) echo "usage: $0 restart etcd|kube-apiserver" >&2; exit 2 ;;
  esac
  ready || { echo "the Virga test Kubernetes control plane is not running (scripts/kube.sh start)" >&2; exit 1; }
  pid=$(cat "$state/$d.pid")
  kill -9 "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  rm -f "$state/$d.pid"
  if [ "$d" = etcd ]; then
    start_etcd
    wait_for kube-apiserver 120 api_ready
  else
    start_apiserver
  fi
  exit 0 ;;
start) ;;
*) echo "usage: $0 build|start|stop|status|restart etcd|kube-apiserver|kubeconfig|env" >&2; exit 2 ;;
esac

if ready; then echo "$kubeconfig"; exit 0; fi
build
stop_all # whatever survived of an earlier start
for port in "$etcd_port" "$((etcd_port + 10))" "$api_port"; do
  if (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port on 127.0.0.1 is taken: set VIRGA_KUBE_ETCD_PORT / VIRGA_KUBE_PORT" >&2
    exit 1
  fi
done
mkdir -p "$pki" "$logs"
rm -rf "$state/etcd"
stages

# Certificates: a CA, the API server's serving certificate (loopback and the in-cluster
# names), an admin client (system:masters) and the service account signing key.
if [ ! -f "$pki/admin.crt" ]; then
  (
    cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -subj /CN=virga-kube-ca 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\nextendedKeyUsage=serverAuth\n' >apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt \
      -days 3650 -extfile apiserver.ext 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=virga-admin" 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt \
      -days 3650 -extfile client.ext 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ./*.csr
  )
fi
b64() { base64 -w0 <"$1"; }
cat >"$kubeconfig.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: virga
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority-data: $(b64 "$pki/ca.crt")
users:
- name: virga-admin
  user:
    client-certificate-data: $(b64 "$pki/admin.crt")
    client-key-data: $(b64 "$pki/admin.key")
contexts:
- name: virga
  context: {cluster: virga, user: virga-admin, namespace: default}
current-context: virga
EOF
mv "$kubeconfig.tmp" "$kubeconfig"

start_etcd
start_apiserver

launch kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$kubeconfig" \
  --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --use-service-account-credentials=false
launch kube-scheduler "$bin/kube-scheduler" --kubeconfig "$kubeconfig" \
  --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false
launch kwok "$bin/kwok" --kubeconfig "$kubeconfig" --config "$state/kwok-stages.yaml" \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --node-lease-duration-seconds 40

# The fake nodes: the first half on-demand, the second half spot.
node_json() { # node_json NAME POOL
  local labels
  if [ "$2" = spot ]; then
    labels='"karpenter.sh/capacity-type": "spot", "cloud.google.com/gke-spot": "true", "eks.amazonaws.com/capacityType": "SPOT"'
  else
    labels='"karpenter.sh/capacity-type": "on-demand", "eks.amazonaws.com/capacityType": "ON_DEMAND"'
  fi
  cat <<EOF
{"apiVersion": "v1", "kind": "Node",
 "metadata": {"name": "$1", "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
  "labels": {"type": "kwok", "virga.dev/pool": "$2", "kubernetes.io/hostname": "$1", "kubernetes.io/os": "linux",
   "kubernetes.io/arch": "amd64", $labels}},
 "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
  "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"}}}
EOF
}
for ((i = 0; i < nodes; i++)); do
  if ((i < nodes / 2)); then pool=on-demand; else pool=spot; fi
  name=$(printf 'kwok-%s-%03d' "$pool" "$i")
  node_json "$name" "$pool" | api -o /dev/null -X POST -H 'Content-Type: application/json' --data-binary @- \
    "https://127.0.0.1:$api_port/api/v1/nodes"
done

nodes_ready() {
  local n
  n=$(api "https://127.0.0.1:$api_port/api/v1/nodes?labelSelector=type%3Dkwok" |
    tr -d ' \n' | grep -o '"type":"Ready","status":"True"' | wc -l)
  [ "$n" -ge "$nodes" ]
}
default_sa() { api "https://127.0.0.1:$api_port/api/v1/namespaces/default/serviceaccounts/default"; }
wait_for "the $nodes KWOK nodes" 120 nodes_ready
wait_for "the default service account" 60 default_sa
running || { echo "a daemon exited: see $logs" >&2; stop_all; exit 1; }
echo "$kubeconfig"
