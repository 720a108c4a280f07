# Sourced by bench/cluster_bench.sh and bench/cluster_fashion_bench.sh: a
# private RabbitMQ (scripts/rabbitmq_test_server.sh) and a private PostgreSQL
# (initdb + pg_ctl, as tests/store/pg_server.hpp does) in a fresh temporary
# directory, both stopped and removed at exit, and the CPU each has used.
#
#   root=… bin=…; source "$root/bench/cluster_servers.sh"; cluster_servers_start
#   then: $tmp (the directory), $amqp (the broker URL), $pgurl (postgres://…
#   without a database), psql_ DB SQL, loadavg, cpu_snapshot / cpu_report.
#   env: PG_FSYNC=on  PG_STATS=1 (pg_stat_statements)  DNNLAB_PG_BINDIR
pgbin=${DNNLAB_PG_BINDIR:-/usr/lib/postgresql/15/bin}
tmp=$(mktemp -d)
chmod 755 "$tmp"
broker="$tmp/broker"
pgdir="$tmp/pg"
as_pg=()
[[ $(id -u) == 0 ]] && as_pg=(runuser -u postgres --)

cluster_servers_cleanup() {
  "$root/scripts/rabbitmq_test_server.sh" stop "$broker" --rm >/dev/null 2>&1 || true
  [[ -f $pgdir/data/postmaster.pid ]] && "${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdir/data" -m immediate -w stop >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cluster_servers_cleanup EXIT

[[ -x $bin ]] || { echo "no dnnlab binary at $bin (build the dnnlab target)" >&2; exit 1; }
[[ -x $pgbin/initdb ]] || { echo "PostgreSQL server binaries not found in $pgbin (scripts/bootstrap.sh installs postgresql)" >&2; exit 1; }

cluster_servers_start() {
  amqp=$("$root/scripts/rabbitmq_test_server.sh" start "$broker")
  mkdir -p "$pgdir"
  [[ ${#as_pg[@]} -gt 0 ]] && chown postgres: "$pgdir"
  "${as_pg[@]}" "$pgbin/initdb" -D "$pgdir/data" -U postgres -A trust --no-sync -E UTF8 >"$pgdir/initdb.log" 2>&1
  local pgport pgopts
  pgport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  pgopts="-h 127.0.0.1 -p $pgport -k $pgdir -c fsync=${PG_FSYNC:-on}"
  [[ ${PG_STATS:-0} == 1 ]] && pgopts="$pgopts -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
  "${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdir/data" -l "$pgdir/server.log" -w -o "$pgopts" start >/dev/null
  pgurl="postgres://postgres@127.0.0.1:$pgport"
}

psql_() { psql -X -q -At -v ON_ERROR_STOP=1 "$pgurl/$1" -c "$2"; }
loadavg() { cut -d' ' -f1 /proc/loadavg; }

# CPU seconds (user + system) a process and its waited-for children used.
_proc_cpu_ticks() {  # PID -> ticks (0 if gone)
  awk '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " "); print f[12] + f[13] + f[14] + f[15] }' \
    "/proc/$1/stat" 2>/dev/null || echo 0
}
# broker: the Erlang VM (node.pid) and its helpers; postgres: the postmaster,
# its exited backends (waited for) and those still alive. "B P" in seconds.
cpu_snapshot() {
  local hz beam pm b p c
  hz=$(getconf CLK_TCK)
  beam=$(cat "$broker/node.pid" 2>/dev/null || echo 0)
  pm=$(head -1 "$pgdir/data/postmaster.pid")
  b=$(_proc_cpu_ticks "$beam")
  p=$(_proc_cpu_ticks "$pm")
  for c in $(cat "/proc/$pm/task/$pm/children" 2>/dev/null); do
    p=$((p + $(_proc_cpu_ticks "$c")))
  done
  awk -v b="$b" -v p="$p" -v hz="$hz" 'BEGIN { printf "%.2f %.2f\n", b / hz, p / hz }'
}
# cpu_report N "B0 P0" "B1 P1" DNNLAB_SECONDS WALL -> one line, ms per trial.
cpu_report() {
  awk -v n="$1" -v s0="$2" -v s1="$3" -v d="$4" -v w="$5" 'BEGIN {
    split(s0, a, " "); split(s1, b, " ")
    br = (b[1] - a[1]) * 1000 / n; pg = (b[2] - a[2]) * 1000 / n; dn = d * 1000 / n
    printf "CPU ms/trial: dnnlab %.3f, broker %.3f, postgres %.3f, total %.3f (wall %.3f ms/trial; %.2f cores busy)\n",
      dn, br, pg, dn + br + pg, w * 1000 / n, (dn + br + pg) / (w * 1000 / n) }'
}

# The broker's message counters (amqp091, all queue types): "received
# confirmed delivered acked redelivered" since the node started.
amqp_counters() {
  "$root/scripts/rabbitmq_test_server.sh" ctl "$broker" eval '
    M = rabbit_global_counters:overview(),
    P = maps:get([{protocol, amqp091}], M),
    S = fun(K) -> lists:sum([maps:get(K, V, 0) || {[{protocol, amqp091}, {queue_type, _}], V} <- maps:to_list(M)]) end,
    io:format("~b ~b ~b ~b ~b~n", [maps:get(messages_received_total, P), maps:get(messages_confirmed_total, P),
      S(messages_delivered_total), S(messages_acknowledged_total), S(messages_redelivered_total)]).' | head -1
}
# amqp_report N "before" "after" -> one line, per trial.
amqp_report() {
  awk -v n="$1" -v s0="$2" -v s1="$3" 'BEGIN {
    split(s0, a, " "); split(s1, b, " ")
    printf "AMQP per trial: %.3f published, %.3f confirmed, %.3f delivered, %.3f acked, %.3f redelivered\n",
      (b[1] - a[1]) / n, (b[2] - a[2]) / n, (b[3] - a[3]) / n, (b[4] - a[4]) / n, (b[5] - a[5]) / n }'
}
