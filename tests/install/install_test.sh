#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, the prefix MOVED elsewhere, and
# the installed dnnlab run from there: every file in its place, --version,
# a tiny synthetic sweep, then `dnnlab serve` answering the dashboard, a
# content-hashed /core/ wasm URL and /api/stats (whose "build" and the
# trial's provenance say what --version says). Nothing may come from the
# build tree: the installed index.html is marked and the marked one must be
# what is served.
# Usage: install_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
unset DNNLAB_WEB_DIR
tmp=$(mktemp -d)
server=""
cleanup() {
  [[ -n $server ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "install_test: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/staged" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install failed"; }
mv "$tmp/staged" "$tmp/moved"
p=$tmp/moved
dnnlab=$p/bin/dnnlab

for f in bin/dnnlab share/dnnlab/web/index.html share/dnnlab/web/join.html \
         share/dnnlab/web/app.js share/dnnlab/web/core/dnnlab_core.mjs \
         share/dnnlab/web/core/dnnlab_core.wasm share/dnnlab/web/core/dnnlab_core_relaxed.wasm \
         share/doc/dnnlab/README.md share/doc/dnnlab/docs/openapi.yaml \
         share/doc/dnnlab/examples/quick-sweep.yaml share/man/man1/dnnlab.1.gz \
         share/bash-completion/completions/dnnlab lib/systemd/system/dnnlab.service \
         "lib/systemd/system/dnnlab-worker@.service" etc/dnnlab/dnnlab.env; do
  [[ -f $p/$f ]] || fail "$f was not installed"
done

# One man page per subcommand that --help lists, each naming every long flag
# that subcommand's --help shows.
subs=$("$dnnlab" --help | awk '/^Subcommands:/ {on = 1; next} on && NF {print $1}')
[[ -n $subs ]] || fail "no subcommands in dnnlab --help"
for s in $subs; do
  page=$p/share/man/man1/dnnlab-$s.1.gz
  [[ -f $page ]] || fail "no man page for dnnlab $s"
  for flag in $("$dnnlab" "$s" --help | grep -o -- ' --[a-z][a-z0-9-]*' | sort -u); do
    roff=$(sed 's/-/\\\\-/g' <<<"$flag")  # --batch-size as roff: \-\-batch\-size
    zcat "$page" | grep -q -- "$roff\\\\fR" || fail "dnnlab-$s(1) lacks $flag"
  done
done
bash -n "$p/share/bash-completion/completions/dnnlab" || fail "the bash completion does not parse"
(
  # shellcheck source=/dev/null
  source "$p/share/bash-completion/completions/dnnlab"
  COMP_WORDS=(dnnlab se); COMP_CWORD=1; _dnnlab
  [[ " ${COMPREPLY[*]} " == *" serve "* ]] || fail "completion of 'se': ${COMPREPLY[*]}"
  COMP_WORDS=(dnnlab run --wor); COMP_CWORD=2; _dnnlab
  [[ ${COMPREPLY[*]} == "--workers" ]] || fail "completion of 'run --wor': ${COMPREPLY[*]}"
)

# --version: the version, the build id, the compiler and the kernel targets.
version=$("$dnnlab" --version) || fail "dnnlab --version failed"
echo "$version"
[[ $(sed -n 1p <<<"$version") =~ ^dnnlab\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "version line: $version"
build_id=$(sed -n 's/^build \([^ ]*\) (.*)$/\1/p' <<<"$version")
[[ -n $build_id ]] || fail "no build id in: $version"
grep -q '^compiler .' <<<"$version" || fail "no compiler in: $version"
grep -q '^kernels .* (targets: .*scalar)$' <<<"$version" || fail "no kernel targets in: $version"

# A tiny synthetic sweep, one worker process (spawned from the moved binary).
mkdir "$tmp/work"
cd "$tmp/work"
cat >sweep.yaml <<'YAML'
name: install-check
template:
  data: {dataset: synthetic, limit_train: 128, validation: 32}
  model:
    layers:
      - dense: 16
        activation: ${activation}
      - dense: 10
  train:
    epochs: 1
    batch_size: 32
    optimizer: {type: sgd, lr: 0.05}
search:
  method: grid
  parameters:
    activation: [relu, tanh]
YAML
"$dnnlab" run -q -w 1 --no-server --store sqlite:run.db sweep.yaml >run.log 2>&1 ||
  { cat run.log; fail "dnnlab run of the synthetic sweep failed"; }

# dnnlab serve on a free port, over the sweep's store.
echo "<!-- installed copy -->" >>"$p/share/dnnlab/web/index.html"
"$dnnlab" serve --listen 127.0.0.1:0 --store sqlite:run.db >serve.log 2>&1 &
server=$!
url=""
for _ in $(seq 300); do  # up to 30 s on a loaded machine
  url=$(sed -n 's|^dnnlab serving \(http://127\.0\.0\.1:[0-9]*\)/.*|\1|p' serve.log 2>/dev/null || true)
  [[ -n $url ]] && break
  kill -0 "$server" 2>/dev/null || { cat serve.log; fail "dnnlab serve exited"; }
  sleep 0.1
done
[[ -n $url ]] || { cat serve.log; fail "dnnlab serve printed no URL"; }
grep -q "dashboard not built" serve.log && fail "the installed dnnlab did not find its dashboard"

curl -fsS "$url/" -o index.html || fail "GET / failed"
cmp -s index.html "$p/share/dnnlab/web/index.html" || fail "GET / is not the installed index.html"
hash=$(sha256sum "$p/share/dnnlab/web/core/dnnlab_core.wasm" | cut -c1-16)
curl -fsS "$url/core/dnnlab_core.$hash.wasm" -o core.wasm || fail "GET /core/dnnlab_core.$hash.wasm failed"
cmp -s core.wasm "$p/share/dnnlab/web/core/dnnlab_core.wasm" || fail "the served wasm core differs"

stats=$(curl -fsS "$url/api/stats") || fail "GET /api/stats failed"
grep -q "\"build_id\":\"$build_id\"" <<<"$stats" || fail "/api/stats' build is not --version's: $stats"
trial=$(curl -fsS "$url/api/trials/1") || fail "GET /api/trials/1 failed"
grep -q "\"build_id\":\"$build_id\"" <<<"$trial" || fail "trial 1's provenance is not --version's: $trial"
grep -q '"status":"finished"' <<<"$trial" || fail "trial 1 did not finish: $trial"
echo "install_test: ok ($p, $url)"
