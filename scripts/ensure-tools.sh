#!/usr/bin/env bash
# Finds or installs what Ordo's commands need on a fresh machine. Each
# argument names one need; with none, everything the test suite needs.
#   go        the Go toolchain (must already be installed: see README)
#   postgres  PostgreSQL 15 server binaries (initdb, postgres), psql, pgbench
#   protoc    the protobuf compiler
#   pgbouncer PgBouncer, for the proxy benchmark
#   lint      staticcheck, pinned, into .tools/bin
set -euo pipefail
cd "$(dirname "$0")/.."

needs=("$@")
[ ${#needs[@]} -gt 0 ] || needs=(go postgres protoc lint)

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
    protoc)
      command -v protoc >/dev/null 2>&1 || apt_install protobuf-compiler ;;
    pgbouncer)
      command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || apt_install pgbouncer ;;
    lint)
      if [ ! -x .tools/bin/staticcheck ] || ! .tools/bin/staticcheck -version 2>/dev/null | grep -q '0.8.2'; then
        echo "ensure-tools: installing staticcheck v0.8.2" >&2
        GOBIN="$PWD/.tools/bin" go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
      fi ;;
    *) echo "ensure-tools: unknown need $need" >&2; exit 2 ;;
  esac
done
