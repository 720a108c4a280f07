#!/usr/bin/env bash
# The container image end to end, with Podman and no image registry:
#  1. the .deb (`cpack -G DEB`, into a directory of its own);
#  2. a Debian 12 slim base made by packaging/debian_base.sh (mmdebstrap from
#     Debian's mirrors; the tarball is kept in BUILD_DIR/image and made again
#     only when its recipe changes) and `podman import`ed;
#  3. packaging/Containerfile built on it (BASE build argument);
#  4. the README's cluster in containers of that image, on the host network:
#     a private RabbitMQ and PostgreSQL on 127.0.0.1 (the scripts the amqp
#     and pg tests use), `dnnlab serve` in one container, workers in two
#     others (one with two slots), a sweep submitted by `dnnlab submit` from
#     a fourth; every trial finishes once, trained in the worker containers,
#     and the server in its container serves the dashboard and /api/stats
#     to the host;
#  5. the image's default command (`serve` on 0.0.0.0:8080, an sqlite store
#     in its volume) with the port published on 127.0.0.1 only, as the
#     README runs it.
# Every container, volume and image it made is removed after, also on
# failure (the base tarball stays in BUILD_DIR/image).
#
# It needs root, network access to a Debian mirror (the base and the
# image's `apt-get install`) and podman, runc and mmdebstrap
# (scripts/bootstrap.sh). System-wide (podman's storage), so it runs only
# under CI=true or with DNNLAB_TEST_IMAGE=1; otherwise it skips (exit 77).
# Under CI it never skips: what it lacks is a failure.
# Usage: image_test.sh BUILD_DIR
set -euo pipefail
# The system's tools first: a python3 shim earlier in PATH (pyenv's) costs
# seconds a start, and the polling loops below start python3 often.
PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
asked=0
[[ ${CI:-} == true || ${DNNLAB_TEST_IMAGE:-} == 1 ]] && asked=1
cannot() {
  if ((asked)); then
    echo "image_test: $*" >&2
    exit 1
  fi
  echo "image_test: skipped: $* (runs under CI=true or DNNLAB_TEST_IMAGE=1)" >&2
  exit 77
}
((asked)) || cannot "builds images and runs containers system-wide"
[[ $(id -u) -eq 0 ]] || cannot "needs root (podman as root, mmdebstrap)"
for tool in podman runc mmdebstrap cpack curl python3; do
  command -v "$tool" >/dev/null || cannot "$tool is missing (scripts/bootstrap.sh)"
done
[[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] || cannot "no rabbitmq-server (scripts/bootstrap.sh)"
[[ -x ${DNNLAB_PG_BINDIR:-/usr/lib/postgresql/15/bin}/initdb ]] || cannot "no PostgreSQL server (scripts/bootstrap.sh)"

tag=dnnlab-test-$$
image=localhost/$tag:latest
base=localhost/$tag-base:bookworm-slim
tmp=$(mktemp -d /tmp/dnnlab-image.XXXXXX)
chmod 755 "$tmp"
# Podman as root with runc and cgroupfs (crun and the systemd cgroup manager
# fail in these machines' sandbox), no default ulimits (the sandbox refuses
# raising them), events in a file (no journald).
cat >"$tmp/containers.conf" <<'CONF'
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"
CONF
export CONTAINERS_CONF=$tmp/containers.conf
started=$SECONDS
phase_start=$SECONDS
phase() { # NAME: the time since the previous phase
  echo "image_test: $1 took $((SECONDS - phase_start)) s" >&2
  phase_start=$SECONDS
}

cleanup() {
  local rc=$?
  set +e
  if ((rc != 0)); then
    echo "image_test: FAILED (exit $rc); container logs:" >&2
    for c in $(podman ps -a --filter "label=dnnlab-test=$tag" --format '{{.Names}}' 2>/dev/null); do
      echo "--- $c" >&2
      podman logs --tail 30 "$c" >&2 2>&1
    done
  fi
  podman ps -a -q --filter "label=dnnlab-test=$tag" 2>/dev/null | xargs -r podman rm -f -v >/dev/null 2>&1
  podman rmi -f "$image" "$base" >/dev/null 2>&1
  # Intermediate layers of a build that failed half way.
  podman image prune -f --filter "label=dnnlab-test=$tag" >/dev/null 2>&1
  [[ -f $tmp/broker/ports ]] && "$src/scripts/rabbitmq_test_server.sh" stop "$tmp/broker" --rm >/dev/null 2>&1
  [[ -f $tmp/pg/data_dir ]] && "$src/scripts/postgres_test_server.sh" stop "$tmp/pg" >/dev/null 2>&1
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() { echo "image_test: FAIL: $*" >&2; exit 1; }

# Containers of this run: named and labelled by the tag, so that cleanup
# finds them all.
run_container() { # NAME ARGS...
  local name=$1
  shift
  podman run --name "$tag-$name" --label "dnnlab-test=$tag" "$@"
}

# --- 1. the .deb -------------------------------------------------------------
mkdir "$tmp/pkg" "$tmp/ctx"
(cd "$build" && cpack -G DEB -B "$tmp/pkg") >"$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log"; fail "cpack -G DEB failed"; }
deb=$(ls "$tmp"/pkg/dnnlab_*_amd64.deb 2>/dev/null | head -1)
[[ -n $deb ]] || { cat "$tmp/cpack.log"; fail "cpack made no dnnlab_*_amd64.deb"; }
cp "$deb" "$tmp/ctx/"
echo "image_test: $(basename "$deb"), Depends: $(dpkg-deb -f "$deb" Depends)" >&2
phase "the .deb"

# --- 2. the base -------------------------------------------------------------
tarball=$("$src/packaging/debian_base.sh" "$build/image" 2>"$tmp/base.log") ||
  { cat "$tmp/base.log"; fail "packaging/debian_base.sh failed"; }
tail -n 1 "$tmp/base.log" >&2
phase "the Debian base tarball"
podman import --quiet --change 'CMD ["/bin/bash"]' "$tarball" "$base" >/dev/null ||
  fail "podman import $tarball failed"
phase "podman import"

# --- 3. the image ------------------------------------------------------------
# --network host: the RUN step's apt-get reaches the mirror as the host does.
podman build --quiet --pull=never --network host --label "dnnlab-test=$tag" \
  --build-arg "BASE=$base" -f "$src/packaging/Containerfile" -t "$image" "$tmp/ctx" \
  >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "podman build failed"; }
phase "podman build"
size=$(podman image inspect --format '{{.Size}}' "$image")
base_size=$(podman image inspect --format '{{.Size}}' "$base")
echo "image_test: image $((size / 1000000)) MB (base $((base_size / 1000000)) MB)" >&2

want=$("$build/src/cli/dnnlab" --version)
got=$(run_container version --rm "$image" --version) || fail "dnnlab --version in the image failed"
[[ $got == "$want" ]] || fail "the image's --version differs from the build's:
$got
--- the build's:
$want"
build_id=$(sed -n 's/^build \([^ ]*\) (.*)$/\1/p' <<<"$want")
[[ $(run_container whoami --rm --entrypoint id "$image" -un) == dnnlab ]] ||
  fail "the image does not run as the user dnnlab"
run_container examples --rm --entrypoint test "$image" -f /usr/share/doc/dnnlab/examples/quick-sweep.yaml ||
  fail "the image lacks dnnlab's examples"

# --- 4. the cluster ----------------------------------------------------------
amqp=$("$src/scripts/rabbitmq_test_server.sh" start "$tmp/broker") || fail "RabbitMQ did not start"
pg=$("$src/scripts/postgres_test_server.sh" start "$tmp/pg") || fail "PostgreSQL did not start"
phase "RabbitMQ and PostgreSQL"
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
port=$(free_port)
url=http://127.0.0.1:$port
json() { # URL PYTHON-EXPRESSION-OF-j
  curl -fsS "$1" | python3 -c "import json, sys; j = json.load(sys.stdin); print($2)"
}

# The server: the coordinators and the dashboard; it trains nothing itself.
run_container serve -d --network host "$image" serve --listen "127.0.0.1:$port" \
  --broker "$amqp" --store "$pg" >/dev/null || fail "podman run (serve) failed"
token=""
for _ in $(seq 600); do # up to 60 s on a loaded machine
  token=$(podman logs "$tag-serve" 2>/dev/null | sed -n 's/^write token (kept in [^)]*): \([0-9a-f]*\)$/\1/p')
  [[ -n $token ]] && break
  [[ $(podman inspect --format '{{.State.Running}}' "$tag-serve") == true ]] || fail "dnnlab serve exited"
  sleep 0.1
done
[[ -n $token ]] || fail "dnnlab serve in its container printed no write token"
grep -q "dnnlab serving http://127.0.0.1:$port/" <<<"$(podman logs "$tag-serve" 2>&1)" ||
  fail "dnnlab serve did not say it serves $url"

# The dashboard and /api/stats, from the host.
curl -fsS "$url/" -o "$tmp/index.html" || fail "GET $url/ from the host failed"
run_container index --rm --entrypoint cat "$image" /usr/share/dnnlab/web/index.html >"$tmp/index.want"
cmp -s "$tmp/index.html" "$tmp/index.want" || fail "GET / is not the image's /usr/share/dnnlab/web/index.html"
stats=$(curl -fsS "$url/api/stats") || fail "GET $url/api/stats from the host failed"
grep -q "\"build_id\":\"$build_id\"" <<<"$stats" || fail "/api/stats' build is not the image's: $stats"
echo "image_test: the server's container serves $url/ and /api/stats to the host" >&2

# Workers in two containers (slots c1-0 and c1-1; c2, one slot, has no
# suffix), up (registered) before the sweep is published, so that both get
# trials. prefetch=1&prefetch_max=1: one trial per slot
# (README, "RabbitMQ settings"); lease 4 s.
worker_broker="$amqp?heartbeat=4&prefetch=1&prefetch_max=1"
run_container w1 -d --network host -e "DNNLAB_BROKER_URL=$worker_broker" -e "DNNLAB_STORE_URL=$pg" \
  "$image" worker --slots 2 --id c1 --lease 4 >/dev/null || fail "podman run (worker c1) failed"
run_container w2 -d --network host -e "DNNLAB_BROKER_URL=$worker_broker" -e "DNNLAB_STORE_URL=$pg" \
  "$image" worker --slots 1 --id c2 --lease 4 >/dev/null || fail "podman run (worker c2) failed"
workers_up() {
  [[ $(json "$url/api/workers" \
    "sum(1 for w in j['workers'] if w['id'] in ('c1-0', 'c1-1', 'c2') and not w.get('gone'))" \
    2>/dev/null) == 3 ]]
}
for _ in $(seq 600); do
  workers_up && break
  sleep 0.1
done
workers_up || fail "the worker containers' three slots did not register within 60 s: $(curl -fsS "$url/api/workers")"
phase "the server and worker containers"

cat >"$tmp/sweep.yaml" <<'YAML'
name: image-check
template:
  data: {dataset: synthetic, limit_train: 1000, validation: 64}
  model:
    layers:
      - repeat: ${depth}
        dense: 32
        activation: ${activation}
      - dense: 10
  train:
    epochs: 20
    batch_size: 32
    optimizer: {type: sgd, lr: 0.05}
search:
  method: grid
  parameters:
    depth: [1, 2, 3]
    activation: [relu, tanh]
YAML
chmod 644 "$tmp/sweep.yaml"
out=$(run_container submit --rm --network host -e "DNNLAB_TOKEN=$token" \
  -v "$tmp/sweep.yaml:/tmp/sweep.yaml:ro" "$image" submit /tmp/sweep.yaml --server "$url") ||
  fail "dnnlab submit in a container failed: $out"
id=$(sed -n 's/^submitted .* as experiment \([0-9][0-9]*\).*/\1/p' <<<"$out" | head -1)
[[ -n $id ]] || fail "dnnlab submit printed no experiment id: $out"
echo "image_test: submitted experiment $id" >&2

status=""
for _ in $(seq 1800); do # up to 180 s
  status=$(json "$url/api/experiments/$id" "j['status']" 2>/dev/null || true)
  [[ $status == finished || $status == failed || $status == cancelled ]] && break
  sleep 0.1
done
trials=$(curl -fsS "$url/api/experiments/$id/trials?limit=100") || fail "GET the trials failed"
echo "image_test: experiment $id ($status); trials (index status attempt worker):" >&2
python3 -c 'import json, sys
for t in json.load(sys.stdin)["trials"]:
    print(" ", t["index"], t["status"], t["attempt"], t["worker"])' <<<"$trials" >&2
[[ $status == finished ]] || fail "experiment $id did not finish in 180 s: $status"
check() { python3 -c "import json, sys; t = json.load(sys.stdin)['trials']; print($1)" <<<"$trials"; }
[[ $(check "len(t)") == 6 ]] || fail "experiment $id has $(check "len(t)") trials, not 6"
[[ $(check "sum(x['status'] == 'finished' for x in t)") == 6 ]] || fail "not every trial finished"
[[ $(check "len({json.dumps(x['params'], sort_keys=True) for x in t})") == 6 ]] ||
  fail "the six trials do not have six distinct configs"
[[ $(check "max(x['attempt'] for x in t)") == 1 ]] || fail "a trial ran twice"
[[ $(check "all(x['worker'] in ('c1-0', 'c1-1', 'c2') for x in t)") == True ]] ||
  fail "a trial was not trained in a worker container"
echo "image_test: the sweep finished: 6 trials, once each, in the worker containers" \
  "($(check "sum(x['worker'].startswith('c1-') for x in t)") in c1, $(check "sum(x['worker'] == 'c2' for x in t)") in c2)" >&2
phase "the sweep"

# --- 5. the image's default command, its port published on loopback -------
port2=$(free_port)
run_container default -d -p "127.0.0.1:$port2:8080" "$image" >/dev/null ||
  fail "podman run -p 127.0.0.1:$port2:8080 (the default command) failed"
ok=0
for _ in $(seq 600); do
  if curl -fsS "http://127.0.0.1:$port2/api/stats" -o "$tmp/stats2" 2>/dev/null; then
    ok=1
    break
  fi
  [[ $(podman inspect --format '{{.State.Running}}' "$tag-default") == true ]] ||
    fail "the default command (dnnlab serve) exited"
  sleep 0.1
done
((ok)) || fail "the default command's published port 127.0.0.1:$port2 did not answer in 60 s"
grep -q "\"build_id\":\"$build_id\"" "$tmp/stats2" || fail "the published server's /api/stats: $(cat "$tmp/stats2")"
curl -fsS "http://127.0.0.1:$port2/" -o "$tmp/index2.html" && cmp -s "$tmp/index2.html" "$tmp/index.want" || fail "the published server's GET /"
grep -q "store sqlite:/var/lib/dnnlab/dnnlab.db" <<<"$(podman logs "$tag-default" 2>&1)" ||
  fail "the default command does not keep its store in the volume"
phase "the default command, published on 127.0.0.1"

echo "image_test: ok in $((SECONDS - started)) s (image $((size / 1000000)) MB)"
