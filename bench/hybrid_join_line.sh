# Sourced by the hybrid benches: wait_join_line LOG NAME waits (30 s) for
# `train --distributed --listen`'s "join with" line in LOG and sets $url and
# $token from it; without it, prints LOG and exits naming NAME.
wait_join_line() {
  url="" token=""
  for _ in $(seq 300); do
    read -r url token < <(sed -n 's/^hybrid: join with: dnnlab join \([^ ]*\) --token \([0-9a-f]*\).*/\1 \2/p' \
      "$1" 2>/dev/null || true) || true
    [[ -n $url ]] && return 0
    sleep 0.1
  done
  cat "$1" >&2
  echo "$2: no join URL" >&2
  exit 1
}
