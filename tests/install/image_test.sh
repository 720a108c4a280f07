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
#     README runs it;
#  6. packaging/compose.yaml itself, run by podman-compose: RabbitMQ and
#     PostgreSQL from stand-in images (tests/install/compose: Debian's
#     rabbitmq-server and postgresql on the same base, built in the
#     background from 2. on, in place of the public images that no
#     registry serves here), the server and two workers of the image on
#     the compose network, reaching each other by service name; a sweep
#     submitted in the server's container, as the README does, finishes
#     once per trial in the worker containers, the dashboard answers on the
#     published 127.0.0.1 port, and `down -v` leaves no container or volume.
# Every container, volume and image it made is removed after, also on
# failure (the base tarball stays in BUILD_DIR/image).
#
# It needs root, network access to a Debian mirror (the base and the
# images' `apt-get install`) and podman, runc, mmdebstrap, podman-compose
# and CNI's dnsname plugin (scripts/bootstrap.sh). System-wide (podman's
# storage), so it runs only under CI=true or with DNNLAB_TEST_IMAGE=1;
# otherwise it skips (exit 77).
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
for tool in podman runc mmdebstrap podman-compose cpack curl python3; do
  command -v "$tool" >/dev/null || cannot "$tool is missing (scripts/bootstrap.sh)"
done
# Service names on a compose network: without the plugin, podman's CNI
# networks have no DNS and the containers cannot find rabbitmq or postgres.
[[ -x /usr/lib/cni/dnsname ]] ||
  cannot "no CNI dnsname plugin (golang-github-containernetworking-plugin-dnsname; scripts/bootstrap.sh)"
[[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] || cannot "no rabbitmq-server (scripts/bootstrap.sh)"
[[ -x ${DNNLAB_PG_BINDIR:-/usr/lib/postgresql/15/bin}/initdb ]] || cannot "no PostgreSQL server (scripts/bootstrap.sh)"

tag=dnnlab-test-$$
image=localhost/$tag:latest
base=localhost/$tag-base:bookworm-slim
standin_rabbitmq=localhost/$tag-rabbitmq:latest
standin_postgres=localhost/$tag-postgres:latest
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
    for c in $(podman ps -a --filter "label=dnnlab-test=$tag" --format '{{.Names}}' 2>/dev/null) \
      $(podman ps -a --filter "label=io.podman.compose.project=$tag" --format '{{.Names}}' 2>/dev/null); do
      echo "--- $c" >&2
      podman logs --tail 30 "$c" >&2 2>&1
    done
  fi
  # A stand-in build still running: its podman build first, then its shell.
  if [[ -n ${standin_pid:-} ]]; then
    pkill -TERM -P "$standin_pid" 2>/dev/null
    kill "$standin_pid" 2>/dev/null
    wait "$standin_pid" 2>/dev/null
  fi
  podman ps -a -q --filter "label=dnnlab-test=$tag" 2>/dev/null | xargs -r podman rm -f -v >/dev/null 2>&1
  # The compose project (named $tag): its containers, volumes and network.
  podman ps -a -q --filter "label=io.podman.compose.project=$tag" 2>/dev/null |
    xargs -r podman rm -f -t 0 -v >/dev/null 2>&1
  podman volume ls -q --filter "label=io.podman.compose.project=$tag" 2>/dev/null |
    xargs -r podman volume rm -f >/dev/null 2>&1
  # The workers' anonymous volumes, when `down` removed their containers.
  # shellcheck disable=SC2086
  [[ -n ${anon:-} ]] && podman volume rm -f $anon >/dev/null 2>&1
  podman network rm -f "${tag}_default" >/dev/null 2>&1
  podman rmi -f "$image" "$standin_rabbitmq" "$standin_postgres" "$base" >/dev/null 2>&1
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

# The stand-ins for compose.yaml's RabbitMQ and PostgreSQL (6.), built in
# the background from here on: most of their minute and a half is the
# mirror and dpkg. One package layer, two targets.
build_standins() {
  local target
  for target in rabbitmq postgres; do
    local tag_var=standin_$target
    podman build --quiet --pull=never --network host --label "dnnlab-test=$tag" \
      --build-arg "BASE=$base" --target "$target" -t "${!tag_var}" "$src/tests/install/compose" || return 1
  done
}
standin_started=$SECONDS
build_standins >"$tmp/standins.log" 2>&1 &
standin_pid=$!

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

# Waits up to 180 s for experiment ID at URL to end, then checks that its six
# trials finished, each once and with its own config, all trained by workers
# for which the Python expression WORKER (of w, the trial's worker id) is
# true. Leaves the trials' JSON in $trials.
check() { python3 -c "import json, sys; t = json.load(sys.stdin)['trials']; print($1)" <<<"$trials"; }
check_sweep() { # URL ID WORKER
  local url=$1 id=$2 worker=$3 status=""
  for _ in $(seq 1800); do
    status=$(json "$url/api/experiments/$id" "j['status']" 2>/dev/null || true)
    [[ $status == finished || $status == failed || $status == cancelled ]] && break
    sleep 0.1
  done
  trials=$(curl -fsS "$url/api/experiments/$id/trials?limit=100") || fail "GET $url's trials failed"
  echo "image_test: experiment $id ($status); trials (index status attempt worker):" >&2
  python3 -c 'import json, sys
for t in json.load(sys.stdin)["trials"]:
    print(" ", t["index"], t["status"], t["attempt"], t["worker"])' <<<"$trials" >&2
  [[ $status == finished ]] || fail "experiment $id did not finish in 180 s: $status"
  [[ $(check "len(t)") == 6 ]] || fail "experiment $id has $(check "len(t)") trials, not 6"
  [[ $(check "sum(x['status'] == 'finished' for x in t)") == 6 ]] || fail "not every trial finished"
  [[ $(check "len({json.dumps(x['params'], sort_keys=True) for x in t})") == 6 ]] ||
    fail "the six trials do not have six distinct configs"
  [[ $(check "max(x['attempt'] for x in t)") == 1 ]] || fail "a trial ran twice"
  [[ $(check "all((lambda w: $worker)(x['worker']) for x in t)") == True ]] ||
    fail "a trial was not trained in a worker container"
}
check_sweep "$url" "$id" "w in ('c1-0', 'c1-1', 'c2')"
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

# --- 6. packaging/compose.yaml, run by podman-compose ------------------------
wait "$standin_pid" || { cat "$tmp/standins.log"; fail "building the stand-in images failed"; }
standin_pid=""
echo "image_test: the stand-in RabbitMQ and PostgreSQL images were ready" \
  "$((SECONDS - standin_started)) s after their build started" >&2
phase "waiting for the stand-in images"
port3=$(free_port)
url3=http://127.0.0.1:$port3
# The file as the README runs it, with the images and the published address
# from the environment it reads them from. podman-compose 1.0.3 prints every
# podman command it runs (the passwords with them): kept in files, shown on
# failure.
export AMQP_PW=amqp-$RANDOM$RANDOM PG_PW=pg-$RANDOM$RANDOM DNNLAB_IMAGE=$image \
  DNNLAB_RABBITMQ_IMAGE=$standin_rabbitmq DNNLAB_POSTGRES_IMAGE=$standin_postgres \
  DNNLAB_PUBLISH=127.0.0.1:$port3 DNNLAB_WORKERS=2 DNNLAB_SLOTS=2
# A copy in a directory of its own: podman-compose 1.0.3 lets a .env beside
# the file override the environment (docker compose does the opposite), and
# a packaging/.env kept for real use must not reach the test.
mkdir "$tmp/compose"
cp "$src/packaging/compose.yaml" "$tmp/compose/compose.yaml"
compose() { # LOG ARGS...: podman-compose on packaging/compose.yaml, project $tag
  local log=$1
  shift
  podman-compose -p "$tag" -f "$tmp/compose/compose.yaml" "$@" >>"$tmp/$log" 2>&1
}
cfail() { # LOG MESSAGE
  echo "--- podman-compose ($1):" >&2
  sed "s/$AMQP_PW/***/g; s/$PG_PW/***/g" "$tmp/$1" | tail -n 40 >&2
  fail "$2"
}
healthy() { # SERVICE: the compose file's healthcheck for it passes
  podman healthcheck run "${tag}_${1}_1" >/dev/null 2>&1
}
# The README's `up -d`. podman-compose 1.0.3 does not wait for RabbitMQ and
# PostgreSQL to be healthy (depends_on: condition: service_healthy) and
# podman runs no healthcheck on its own without systemd: a server or worker
# started before them exits and is started again (restart: unless-stopped)
# until they answer.
compose up.log up -d || cfail up.log "podman-compose up -d failed"
[[ $(podman network inspect --format '{{.DNSEnabled}}' "${tag}_default" 2>/dev/null) == true ]] ||
  fail "the compose network ${tag}_default has no DNS (CNI's dnsname plugin)"
server=${tag}_server_1
workers=("${tag}_worker_1" "${tag}_worker_2")
for c in "${tag}_rabbitmq_1" "${tag}_postgres_1" "$server" "${workers[@]}"; do
  podman container exists "$c" || cfail up.log "podman-compose up made no container $c"
done
# The compose file's healthchecks (its commands, in the stand-ins).
for _ in $(seq 120); do # up to 120 s
  healthy rabbitmq && healthy postgres && break
  sleep 1
done
healthy rabbitmq || fail "the stand-in RabbitMQ is not healthy (rabbitmq-diagnostics -q ping) after 120 s"
healthy postgres || fail "the stand-in PostgreSQL is not healthy (pg_isready) after 120 s"
# The file's RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS reached the broker: the
# consumer timeout above the longest trial (README, "RabbitMQ settings").
timeout=$(podman exec "${tag}_rabbitmq_1" rabbitmqctl -q eval 'application:get_env(rabbit, consumer_timeout).' 2>&1)
[[ $timeout == "{ok,86400000}" ]] || fail "the compose RabbitMQ's consumer_timeout: $timeout"
phase "compose: up, RabbitMQ and PostgreSQL healthy"
# Each worker container's slots are <host name>-<pid>-<slot> (the worker's
# default id; the host name is the container's).
hosts=$(for c in "${workers[@]}"; do printf "'%s-'," "$(podman inspect --format '{{.Config.Hostname}}' "$c")"; done)
compose_workers_up() { # both worker containers' two slots each, at the server
  [[ $(json "$url3/api/workers" \
    "sorted(sum(1 for w in j['workers'] if w['id'].startswith(h) and not w.get('gone')) for h in ($hosts))" \
    2>/dev/null) == "[2, 2]" ]]
}
for _ in $(seq 900); do # up to 90 s
  compose_workers_up && break
  sleep 0.1
done
compose_workers_up ||
  fail "the compose workers' four slots did not register at $url3 within 90 s: $(curl -sS "$url3/api/workers")"
echo "image_test: compose restarts while RabbitMQ and PostgreSQL started:" \
  "$(for c in "$server" "${workers[@]}"; do printf '%s %s; ' "${c#"${tag}_"}" "$(podman inspect --format '{{.RestartCount}}' "$c")"; done)" >&2
phase "compose: the server and the workers"

# The dashboard and /api/stats on the published port, from the host.
curl -fsS "$url3/" -o "$tmp/index3.html" && cmp -s "$tmp/index3.html" "$tmp/index.want" ||
  fail "GET $url3/ (the compose server's published port) is not the dashboard"
stats=$(curl -fsS "$url3/api/stats") && grep -q "\"build_id\":\"$build_id\"" <<<"$stats" ||
  fail "the compose server's /api/stats: $stats"
# Its store is the postgres service, by its name (the broker's part shows
# in the sweep below).
grep -q 'postgres://dnnlab:\*\*\*@postgres:5432/dnnlab' <<<"$(podman logs "$server" 2>&1)" ||
  fail "the compose server does not use the postgres service as its store"

# The README's submit: in the server's container, with the write token the
# server keeps in its volume (the working directory). The sweep goes in on
# standard input: the image has no data set, so not the README's example.
sed 's/^name: image-check$/name: compose-check/' "$tmp/sweep.yaml" >"$tmp/sweep3.yaml"
compose submit.log exec -T server sh -c 'cat >/tmp/sweep.yaml && dnnlab submit /tmp/sweep.yaml' \
  <"$tmp/sweep3.yaml" || cfail submit.log "podman-compose exec server dnnlab submit failed"
id3=$(sed -n 's/^submitted .* as experiment \([0-9][0-9]*\).*/\1/p' "$tmp/submit.log" | head -1)
[[ -n $id3 ]] || cfail submit.log "dnnlab submit in the compose server printed no experiment id"
echo "image_test: submitted experiment $id3 in the compose server's container" >&2
check_sweep "$url3" "$id3" "w.startswith(($hosts))"
echo "image_test: the compose sweep finished: 6 trials, once each, in the compose workers" >&2
phase "compose: the sweep"

# The volumes the containers use: the named ones (the file's) and the
# anonymous ones (the image's VOLUME, in the workers).
anon=$(podman inspect --format '{{range .Mounts}}{{.Name}} {{end}}' "${workers[@]}")
compose down.log down -v || cfail down.log "podman-compose down -v failed"
left=$(podman ps -a -q --filter "label=io.podman.compose.project=$tag")
[[ -z $left ]] || fail "podman-compose down left containers: $left"
left=$(podman volume ls -q --filter "label=io.podman.compose.project=$tag")
[[ -z $left ]] || fail "podman-compose down -v left volumes: $left"
# podman-compose 1.0.3 leaves the containers' anonymous volumes (it removes
# the containers without -v) and its network; docker compose down -v
# removes both.
for v in $anon; do
  podman volume rm "$v" >/dev/null || fail "podman volume rm $v (a worker's anonymous volume) failed"
done
podman network rm "${tag}_default" >/dev/null || fail "podman network rm ${tag}_default failed"
phase "compose: down -v"

echo "image_test: ok in $((SECONDS - started)) s (image $((size / 1000000)) MB)"
