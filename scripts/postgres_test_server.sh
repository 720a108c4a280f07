#!/usr/bin/env bash
# A private PostgreSQL for tests: initdb + pg_ctl in a temporary directory,
# listening on 127.0.0.1 on a free port, fsync off, run as the unprivileged
# `postgres` user when started as root (the server refuses root). Started once
# per ctest run by the "postgres" fixture (tests/CMakeLists.txt); each test
# process makes databases of its own on it (tests/store/pg_server.hpp).
#
#   scripts/postgres_test_server.sh start DIR   # prints the admin URL (also in DIR/url)
#   scripts/postgres_test_server.sh stop DIR    # stops the server, removes its data and DIR
#
# DIR only holds the URL and where the data lives: the data directory is made
# under $TMPDIR, which the `postgres` user can reach wherever DIR is.
# The binaries come from DNNLAB_PG_BINDIR or /usr/lib/postgresql/15/bin
# (Debian's postgresql-15, installed by scripts/bootstrap.sh). Exit 77 when
# they are missing; under CI (env CI set) that is a failure, exit 1.
#
# DNNLAB_TEST_POSTGRES_ADDRESS=0.0.0.0 listens beyond loopback and trusts
# clients on the server's own subnets (pg_hba `samenet`: the several-hosts
# test's veths); the printed URL still names 127.0.0.1.
# DNNLAB_TEST_POSTGRES_OPTIONS: more `postgres` flags (e.g. "-c tcp_keepalives_idle=2").
set -euo pipefail

cmd=${1:?usage: postgres_test_server.sh start|stop DIR}
dir=${2:?usage: postgres_test_server.sh start|stop DIR}
bin=${DNNLAB_PG_BINDIR:-/usr/lib/postgresql/15/bin}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

as_server_user=()
if [[ $(id -u) -eq 0 ]]; then as_server_user=(runuser -u postgres --); fi

stop_server() {
  [[ -f $dir/data_dir ]] || return 0
  local data
  data=$(cat "$dir/data_dir")
  if [[ -d $data/data ]]; then
    "${as_server_user[@]}" "$bin/pg_ctl" -D "$data/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$data"
  rm -f "$dir/data_dir" "$dir/url"
}

case "$cmd" in
  start)
    if [[ ! -x $bin/initdb ]]; then
      echo "postgres_test_server: no PostgreSQL server in $bin (apt-get install postgresql, or set DNNLAB_PG_BINDIR)" >&2
      [[ -n ${CI:-} ]] && exit 1
      exit 77
    fi
    stop_server # a server left by an interrupted run
    data=$(mktemp -d "${TMPDIR:-/tmp}/dnnlab-pg-XXXXXX")
    echo "$data" >"$dir/data_dir"
    if [[ ${#as_server_user[@]} -gt 0 ]]; then chown postgres: "$data"; fi
    if ! "${as_server_user[@]}" "$bin/initdb" -D "$data/data" -U postgres -A trust --no-sync -E UTF8 \
      >"$data/initdb.log" 2>&1; then
      echo "postgres_test_server: initdb failed:" >&2
      cat "$data/initdb.log" >&2
      stop_server
      exit 1
    fi
    address=${DNNLAB_TEST_POSTGRES_ADDRESS:-127.0.0.1}
    if [[ $address != 127.0.0.1 ]]; then
      echo "host all all samenet trust" >>"$data/data/pg_hba.conf"
    fi
    # -F: no fsync (a test server's data dies with it); the socket directory
    # is the data's, not /var/run/postgresql. The free port is free when
    # chosen, not when bound: another try takes another port.
    started=
    for _ in 1 2 3; do
      port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
      if "${as_server_user[@]}" "$bin/pg_ctl" -D "$data/data" -l "$data/server.log" -w \
        -o "-F -h $address -p $port -k $data ${DNNLAB_TEST_POSTGRES_OPTIONS:-}" start >/dev/null 2>&1; then
        started=1
        break
      fi
    done
    if [[ -z $started ]]; then
      echo "postgres_test_server: the server did not start:" >&2
      tail -20 "$data/server.log" >&2
      stop_server
      exit 1
    fi
    # Written whole, then renamed: a reader sees no URL or the full one.
    echo "postgres://postgres@127.0.0.1:$port/postgres" >"$dir/url.tmp"
    mv "$dir/url.tmp" "$dir/url"
    cat "$dir/url"
    ;;
  stop)
    stop_server
    rmdir "$dir" 2>/dev/null || true
    ;;
  *)
    echo "postgres_test_server: unknown command '$cmd' (start|stop)" >&2
    exit 2
    ;;
esac
