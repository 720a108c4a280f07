#!/usr/bin/env bash
# A private RabbitMQ for tests: one node in DIR on 127.0.0.1, free ports,
# no plugins, stopped and its epmd killed after. Used by the ctest fixture
# (tests/queue) and by tests/queue/rabbitmq_server.hpp.
#
#   scripts/rabbitmq_test_server.sh start DIR   # prints the amqp:// URL (also in DIR/url)
#   scripts/rabbitmq_test_server.sh stop DIR    # stops the node; DIR keeps its data
#   scripts/rabbitmq_test_server.sh start DIR   # again: same ports, durable queues survive
#   scripts/rabbitmq_test_server.sh stop DIR --rm
#   scripts/rabbitmq_test_server.sh ctl DIR ARGS...   # rabbitmqctl ARGS on the node
#
# DNNLAB_TEST_RABBITMQ_ADDRESS=0.0.0.0 listens beyond loopback and lets guest
# log in from there (tests/cluster/netns_test.sh: workers in other network
# namespaces); the URL printed still names 127.0.0.1.
#
# DNNLAB_TEST_RABBITMQ_TLS_DIR=CERTS (at the first start; restarts keep it)
# adds a TLS listener on 127.0.0.1 and a free port, with CERTS/ca.pem,
# CERTS/server.pem and CERTS/server.key; its amqps:// URL goes to DIR/amqps_url.
# Clients are not asked for certificates (verify_none).
#
# Exit 77 when rabbitmq-server is not installed (scripts/bootstrap.sh installs
# it); under CI (env CI set) that is a failure, exit 1.
set -euo pipefail

cmd=${1:?usage: rabbitmq_test_server.sh start|stop DIR [--rm]}
dir=${2:?usage: rabbitmq_test_server.sh start|stop DIR [--rm]}
bin=/usr/lib/rabbitmq/bin
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The node's environment: everything under DIR, nothing from /etc/rabbitmq.
node_env() {
  # shellcheck disable=SC1091
  source "$dir/ports"
  export HOME="$dir" RABBITMQ_HOME="$dir" \
    RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log" \
    RABBITMQ_NODENAME="$node" RABBITMQ_NODE_IP_ADDRESS="${DNNLAB_TEST_RABBITMQ_ADDRESS:-127.0.0.1}" \
    RABBITMQ_NODE_PORT="$amqp_port" RABBITMQ_DIST_PORT="$dist_port" \
    ERL_EPMD_PORT="$epmd_port" ERL_EPMD_ADDRESS=127.0.0.1 ERL_CRASH_DUMP="$dir/erl_crash.dump" \
    RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" \
    RABBITMQ_PID_FILE="$dir/node.pid" RABBITMQ_CONF_ENV_FILE=/dev/null
}

case "$cmd" in
  start)
    if [[ ! -x $bin/rabbitmq-server ]]; then
      echo "rabbitmq_test_server: rabbitmq-server is not installed (run scripts/bootstrap.sh)" >&2
      [[ -n ${CI:-} ]] && exit 1
      exit 77
    fi
    fresh=0
    if [[ ! -f $dir/ports ]]; then
      fresh=1
      # Ports chosen once, so that a restart finds its clients again.
      {
        echo "node=dnnlab-test-$$-$RANDOM@localhost"
        echo "amqp_port=$(free_port)"
        echo "dist_port=$(free_port)"
        echo "epmd_port=$(free_port)"
        if [[ -n ${DNNLAB_TEST_RABBITMQ_TLS_DIR:-} ]]; then
          echo "amqps_port=$(free_port)"
          echo "tls_dir='$(cd "$DNNLAB_TEST_RABBITMQ_TLS_DIR" && pwd)'"
        fi
      } >"$dir/ports"
    fi
    node_env
    echo "[]." >"$dir/enabled_plugins"
    # consumer_timeout: a delivery unacked for longer closes its channel
    # (RabbitMQ 3.10 has it server-wide only). Trials in tests are short, and
    # deployments raise it above their longest trial (src/queue/README.md).
    cat >"$dir/rabbitmq.conf" <<CONF
listeners.tcp.default = $amqp_port
loopback_users.guest = $([[ -n ${DNNLAB_TEST_RABBITMQ_ADDRESS:-} ]] && echo false || echo true)
consumer_timeout = ${DNNLAB_TEST_RABBITMQ_CONSUMER_TIMEOUT_MS:-3600000}
log.console = false
log.file.level = warning
CONF
    if [[ -n ${tls_dir:-} ]]; then
      cat >>"$dir/rabbitmq.conf" <<CONF
listeners.ssl.default = 127.0.0.1:$amqps_port
ssl_options.cacertfile = $tls_dir/ca.pem
ssl_options.certfile = $tls_dir/server.pem
ssl_options.keyfile = $tls_dir/server.key
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
CONF
    fi
    setsid "$bin/rabbitmq-server" >"$dir/server.out" 2>&1 </dev/null &
    echo $! >"$dir/server.pid"
    for _ in $(seq 1 120); do
      if "$bin/rabbitmqctl" -n "$node" -q await_startup --timeout 1 >/dev/null 2>&1; then
        if [[ -n ${tls_dir:-} ]]; then
          echo "amqps://guest:guest@127.0.0.1:$amqps_port/%2f" >"$dir/amqps_url"
        fi
        echo "amqp://guest:guest@127.0.0.1:$amqp_port/%2f" | tee "$dir/url"
        exit 0
      fi
      if ! kill -0 "$(cat "$dir/server.pid")" 2>/dev/null; then
        # A port chosen by free_port can be taken by another process before
        # the node binds it (ctest starts several nodes at once): on a first
        # start, choose new ports, at most three times.
        if [[ $fresh == 1 && ${DNNLAB_RABBITMQ_START_TRY:-1} -lt 3 ]] &&
          grep -q "already_used\|eaddrinuse" "$dir/server.out"; then
          epmd -port "$epmd_port" -kill >/dev/null 2>&1 || true
          rm -f "$dir/ports"
          DNNLAB_RABBITMQ_START_TRY=$((${DNNLAB_RABBITMQ_START_TRY:-1} + 1)) exec "$0" start "$dir"
        fi
        echo "rabbitmq_test_server: the node exited while starting:" >&2
        tail -20 "$dir/server.out" >&2
        exit 1
      fi
      sleep 0.5
    done
    echo "rabbitmq_test_server: the node did not start in 60 s (see $dir/server.out)" >&2
    exit 1
    ;;
  stop)
    [[ -f $dir/ports ]] || exit 0
    node_env
    if [[ -f $dir/server.pid ]]; then
      pid=$(cat "$dir/server.pid")
      "$bin/rabbitmqctl" -n "$node" -q stop >/dev/null 2>&1 || true
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
      rm -f "$dir/server.pid" "$dir/url" "$dir/amqps_url"
    fi
    # Only our epmd: it listens on this node's own port.
    epmd -port "$epmd_port" -kill >/dev/null 2>&1 || true
    if [[ ${3:-} == --rm ]]; then rm -rf "$dir"; fi
    ;;
  ctl)
    [[ -f $dir/ports ]] || exit 1
    node_env
    shift 2
    exec "$bin/rabbitmqctl" -n "$node" -q "$@"
    ;;
  *)
    echo "rabbitmq_test_server: unknown command '$cmd' (start|stop)" >&2
    exit 2
    ;;
esac
