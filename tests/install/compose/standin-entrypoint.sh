#!/bin/sh
# The entrypoint of the stand-in RabbitMQ and PostgreSQL images (Containerfile
# beside it): `rabbitmq` or `postgres`, configured from the same environment
# variables as the public images, logging to standard output, and run in the
# foreground as their own users.
set -eu

case "${1:-}" in
  rabbitmq)
    # As the public image: RABBITMQ_DEFAULT_USER/PASS become the first user
    # (made when the node's database is new), the listener is 5672 on every
    # address, the log goes to the console.
    # RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS is read by rabbitmq-server itself.
    mkdir -p /etc/rabbitmq
    {
      echo 'listeners.tcp.default = 5672'
      echo 'loopback_users.guest = true'
      echo 'log.console = true'
      echo 'log.console.level = warning'
      echo 'log.file = false'
      if [ -n "${RABBITMQ_DEFAULT_USER:-}" ]; then
        echo "default_user = $RABBITMQ_DEFAULT_USER"
        echo "default_pass = ${RABBITMQ_DEFAULT_PASS:?RABBITMQ_DEFAULT_PASS is empty}"
      fi
    } >/etc/rabbitmq/rabbitmq.conf
    echo '[].' >/etc/rabbitmq/enabled_plugins
    chown -R rabbitmq:rabbitmq /var/lib/rabbitmq
    cd /var/lib/rabbitmq
    exec runuser -u rabbitmq -- /usr/lib/rabbitmq/bin/rabbitmq-server
    ;;
  postgres)
    # As the public image: a new data directory (PGDATA) is made with
    # POSTGRES_USER as its superuser and POSTGRES_PASSWORD as that user's
    # password, POSTGRES_DB is created (default: the user's name), local
    # socket connections are trusted and TCP ones from anywhere need the
    # password (scram-sha-256).
    bin=/usr/lib/postgresql/15/bin
    PGDATA=${PGDATA:-/var/lib/postgresql/data}
    user=${POSTGRES_USER:-postgres}
    db=${POSTGRES_DB:-$user}
    mkdir -p "$PGDATA" /run/postgresql
    chown postgres:postgres "$PGDATA" /run/postgresql
    chmod 700 "$PGDATA"
    if [ ! -s "$PGDATA/PG_VERSION" ]; then
      pw=$(mktemp)
      printf '%s\n' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is empty}" >"$pw"
      chown postgres "$pw"
      runuser -u postgres -- "$bin/initdb" -D "$PGDATA" --username="$user" --pwfile="$pw" \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
      rm -f "$pw"
      echo 'host all all all scram-sha-256' >>"$PGDATA/pg_hba.conf"
      if [ "$db" != postgres ]; then
        echo "CREATE DATABASE \"$db\";" |
          runuser -u postgres -- "$bin/postgres" --single -D "$PGDATA" -j postgres >/dev/null
      fi
      echo "standin: made $PGDATA (superuser $user, database $db)"
    fi
    exec runuser -u postgres -- "$bin/postgres" -D "$PGDATA" \
      -c listen_addresses='*' -c unix_socket_directories=/run/postgresql
    ;;
  *)
    exec "$@"
    ;;
esac
