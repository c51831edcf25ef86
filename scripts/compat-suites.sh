#!/usr/bin/env bash
# make compat-suites SUITES_DIR=…: runs drivers' own test suites through a
# 3-node Ordo cluster and directly against plain PostgreSQL set up the same
# way (test/compat/suitecluster: same binaries, settings, roles, database),
# and prints, per suite, pass/fail/skip both ways and the tests that pass
# directly but not through Ordo, then one RESULT line. Not part of make test.
#
# SUITES_DIR holds checkouts of the suites' repositories (they are not part
# of Ordo; bring them with git, at the pinned tags below). Whichever of
# these it finds is run, one suite at a time:
#   SUITES_DIR/psycopg        github.com/psycopg/psycopg       tag 3.3.4
#   SUITES_DIR/pgjdbc         github.com/pgjdbc/pgjdbc         tag REL42.7.13
#   SUITES_DIR/node-postgres  github.com/brianc/node-postgres  tag pg@8.23.0
#   SUITES_DIR/sqlalchemy     github.com/sqlalchemy/sqlalchemy tag rel_2_0_44 (its ORM's tests)
# Their dependencies are installed, pinned, from PyPI, Maven Central and npm
# into SUITES_DIR/.deps (a Python venv, Maven jars, node_modules).
#
# Each suite gets a fresh cluster and a fresh direct server. Results (JUnit
# XML or TSV per run, the runs' output, the differences, the node logs) go
# to COMPAT_RESULTS (default /tmp/ordo-compat-suites).
#
# Environment: SUITES (space-separated subset, e.g. "psycopg pgjdbc"),
# COMPAT_PROTOCOL (default dbsm), PSYCOPG_MARKERS (pytest -m expression,
# default "not slow and not timing": psycopg's own marks for tests that
# sleep, mostly the pool's, and for timing-based tests), PYTEST_ARGS / JUNIT_ARGS (extra arguments,
# e.g. a -k filter), PGJDBC_CLASSES / PGJDBC_EXCLUDE (extended regular
# expressions a pgjdbc test class name must / must not match), SUITE_TIMEOUT (seconds per run,
# default 1800: a run cut short reports what it ran, and the tests it did
# not reach are counted as "not run", not as failures).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

SUITES_DIR=${SUITES_DIR:-}
if [ -z "$SUITES_DIR" ] || [ ! -d "$SUITES_DIR" ]; then
  echo "compat-suites: set SUITES_DIR to a directory holding psycopg/, pgjdbc/ and/or node-postgres/ checkouts" >&2
  exit 2
fi
SUITES_DIR=$(cd "$SUITES_DIR" && pwd)
RESULTS=${COMPAT_RESULTS:-/tmp/ordo-compat-suites}
PROTOCOL=${COMPAT_PROTOCOL:-dbsm}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-1800}
DEPS=$SUITES_DIR/.deps
mkdir -p "$RESULTS" "$DEPS"

bash scripts/ensure-tools.sh go postgres

# ---- pinned dependencies -------------------------------------------------

PSYCOPG_PIP=(pytest==8.4.2 anyio==4.11.0 pproxy==2.7.9 typing-extensions==4.15.0 pytest-timeout==2.4.0)
# SQLAlchemy's tests want pytest < 8.4 (its tox.ini); psycopg 3 from PyPI
# (pure Python, over the system's libpq) is its driver here.
SQLALCHEMY_PIP=(pytest==8.3.5 typing-extensions==4.15.0 psycopg==3.2.12 pytest-timeout==2.4.0)
PGJDBC_VERSION=42.7.13   # the driver jar the tests are compiled against
JUNIT_BOM=5.14.4
JUNIT_PLATFORM=1.14.4
NPM_DEPS='"pg-protocol": "1.16.0", "pg-pool": "3.14.0", "pg-connection-string": "2.14.0",
  "pg-types": "2.2.0", "pgpass": "1.0.5", "async": "2.6.4", "bluebird": "3.7.2",
  "co": "4.6.0", "pg-copy-streams": "0.3.0"'

need_cmd() {
  command -v "$1" >/dev/null 2>&1 && return 0
  shift
  echo "compat-suites: installing $*" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

deps_psycopg() {
  need_cmd python3 python3 python3-venv
  local venv=$DEPS/psycopg-venv stamp
  stamp="${PSYCOPG_PIP[*]} $(git -C "$SUITES_DIR/psycopg" rev-parse HEAD 2>/dev/null || cat "$SUITES_DIR/psycopg/psycopg/pyproject.toml" | md5sum)"
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "${PSYCOPG_PIP[@]}"
    # psycopg itself from the checkout (pure Python, over the system libpq).
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "$SUITES_DIR/psycopg/psycopg" "$SUITES_DIR/psycopg/psycopg_pool"
    echo "$stamp" >"$venv/.stamp"
  fi
  ldconfig -p | grep 'libpq.so.5' >/dev/null || need_cmd __none__ libpq5
}

deps_sqlalchemy() {
  need_cmd python3 python3 python3-venv
  local venv=$DEPS/sqlalchemy-venv stamp="${SQLALCHEMY_PIP[*]}"
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "${SQLALCHEMY_PIP[@]}"
    echo "$stamp" >"$venv/.stamp"
  fi
  ldconfig -p | grep 'libpq.so.5' >/dev/null || need_cmd __none__ libpq5
}

deps_pgjdbc() {
  need_cmd mvn maven
  need_cmd javac default-jdk-headless
  local d=$DEPS/pgjdbc
  mkdir -p "$d"
  cat >"$d/pom.xml.new" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.ordo</groupId><artifactId>pgjdbc-suite-deps</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencyManagement><dependencies>
    <dependency><groupId>org.junit</groupId><artifactId>junit-bom</artifactId><version>$JUNIT_BOM</version><type>pom</type><scope>import</scope></dependency>
  </dependencies></dependencyManagement>
  <dependencies>
    <dependency><groupId>org.postgresql</groupId><artifactId>postgresql</artifactId><version>$PGJDBC_VERSION</version></dependency>
    <dependency><groupId>org.junit.jupiter</groupId><artifactId>junit-jupiter-api</artifactId></dependency>
    <dependency><groupId>org.junit.jupiter</groupId><artifactId>junit-jupiter-params</artifactId></dependency>
    <dependency><groupId>org.junit.jupiter</groupId><artifactId>junit-jupiter-engine</artifactId></dependency>
    <dependency><groupId>org.junit.platform</groupId><artifactId>junit-platform-console-standalone</artifactId><version>$JUNIT_PLATFORM</version></dependency>
    <dependency><groupId>org.hamcrest</groupId><artifactId>hamcrest</artifactId><version>3.0</version></dependency>
    <dependency><groupId>uk.org.webcompere</groupId><artifactId>system-stubs-jupiter</artifactId><version>2.1.8</version></dependency>
    <dependency><groupId>org.osgi</groupId><artifactId>org.osgi.service.jdbc</artifactId><version>1.0.0</version></dependency>
    <dependency><groupId>org.checkerframework</groupId><artifactId>checker-qual</artifactId><version>3.55.1</version></dependency>
  </dependencies>
</project>
EOF
  if ! cmp -s "$d/pom.xml.new" "$d/pom.xml" || [ ! -d "$d/lib" ]; then
    mv "$d/pom.xml.new" "$d/pom.xml"
    rm -rf "$d/lib" "$d/classes"
    (cd "$d" && mvn -q -B dependency:copy-dependencies -DoutputDirectory=lib >&2)
  fi
  rm -f "$d/pom.xml.new"
  # pgjdbc builds with Gradle, whose distribution and plugins are not on
  # Maven Central: compile its testkit and test sources with javac against
  # the released driver jar of the same version instead (the same classes
  # as the tag's main sources).
  local src=$SUITES_DIR/pgjdbc stamp
  stamp=$(find "$src/testkit/src/main/java" "$src/pgjdbc/src/test" -type f -newer "$d/classes/.stamp" 2>/dev/null | head -1 || true)
  if [ ! -f "$d/classes/.stamp" ] || [ -n "$stamp" ]; then
    rm -rf "$d/classes" && mkdir -p "$d/classes"
    find "$src/testkit/src/main/java" "$src/pgjdbc/src/test/java" -name '*.java' >"$d/sources.txt"
    javac -nowarn -encoding UTF-8 -proc:none -d "$d/classes" \
      -cp "$(ls "$d"/lib/*.jar | grep -v console-standalone | tr '\n' :)" @"$d/sources.txt" 2>&1 | grep -v '^Note:' >&2 || true
    cp -r "$src/pgjdbc/src/test/resources/." "$d/classes/"
    touch "$d/classes/.stamp"
  fi
}

deps_node() {
  need_cmd node nodejs
  need_cmd npm npm
  local d=$DEPS/node-postgres
  mkdir -p "$d"
  printf '{ "name": "ordo-compat-npm-deps", "private": true, "dependencies": { %s } }\n' "$NPM_DEPS" >"$d/package.json.new"
  if ! cmp -s "$d/package.json.new" "$d/package.json" || [ ! -d "$d/node_modules" ]; then
    mv "$d/package.json.new" "$d/package.json"
    (cd "$d" && npm install --no-audit --no-fund --loglevel=error >&2)
  fi
  rm -f "$d/package.json.new"
  # The released packages stand in for the monorepo's (whose pg-protocol
  # must be built with TypeScript): the same versions as the tag's.
  local nm=$SUITES_DIR/node-postgres/packages/pg/node_modules
  if [ -d "$nm" ] && [ ! -L "$nm" ]; then
    echo "compat-suites: using the node_modules already in $nm" >&2
  else
    ln -sfn "$d/node_modules" "$nm"
  fi
}

# ---- the servers -----------------------------------------------------------

CLUSTER_PID=""
CLUSTER_FIFO=""
stop_cluster() {
  if [ -n "$CLUSTER_PID" ]; then
    exec 9>&- || true   # closing suitecluster's stdin stops it
    wait "$CLUSTER_PID" 2>/dev/null || true
    CLUSTER_PID=""
  fi
  [ -z "$CLUSTER_FIFO" ] || rm -f "$CLUSTER_FIFO"
}
trap stop_cluster EXIT

# start_cluster DIR: a fresh cluster and direct server; sources their env.
start_cluster() {
  local dir=$1
  rm -rf "$dir" && mkdir -p "$dir"
  CLUSTER_FIFO=$dir/stdin
  mkfifo "$CLUSTER_FIFO"
  "$RESULTS/suitecluster" -dir "$dir" -env "$dir/env" -bin "$RESULTS/ordo" -protocol "$PROTOCOL" \
    <"$CLUSTER_FIFO" >"$dir/suitecluster.log" 2>&1 &
  CLUSTER_PID=$!
  exec 9>"$CLUSTER_FIFO"
  local i
  for i in $(seq 1 240); do
    [ -f "$dir/env" ] && break
    if ! kill -0 "$CLUSTER_PID" 2>/dev/null; then
      cat "$dir/suitecluster.log" >&2
      echo "compat-suites: the cluster did not start" >&2
      exit 1
    fi
    sleep 0.5
  done
  [ -f "$dir/env" ] || { echo "compat-suites: the cluster did not start in 120s" >&2; exit 1; }
  # shellcheck disable=SC1091
  . "$dir/env"
  read -r -a OPORTS <<<"$ORDO_PORTS"
}

# ---- the suites ------------------------------------------------------------

# run_psycopg TARGET HOST PORT OUT: psycopg's pytest suite (tests/, with
# tests/pool) as the superuser postgres on database test.
run_psycopg() {
  local target=$1 host=$2 port=$3 out=$4
  # SIGINT at the deadline: pytest still writes the report of what ran.
  (cd "$SUITES_DIR/psycopg" && PSYCOPG_IMPL=python timeout -s INT -k 60 "$SUITE_TIMEOUT" "$DEPS/psycopg-venv/bin/python" -m pytest tests \
      --test-dsn "host=$host port=$port user=postgres password=postgres dbname=test" \
      -m "${PSYCOPG_MARKERS-not slow and not timing}" -q -p no:randomly -o cache_dir="$RESULTS/pytest-cache-$target" --timeout 30 \
      --junitxml "$out.xml" ${PYTEST_ARGS:-} >"$out.log" 2>&1) || true
  RUN_RESULT=$out.xml
}

# run_sqlalchemy TARGET HOST PORT OUT: SQLAlchemy's own ORM tests
# (SQLALCHEMY_TESTS, default test/orm) with psycopg 3, as the superuser
# postgres on database test, after creating the schemas its tests use
# (test_schema, test_schema_2; through Ordo they are replicated DDL).
run_sqlalchemy() {
  local target=$1 host=$2 port=$3 out=$4
  PGPASSWORD=postgres psql -X -q -h "$host" -p "$port" -U postgres -d test \
    -c "CREATE SCHEMA IF NOT EXISTS test_schema" -c "CREATE SCHEMA IF NOT EXISTS test_schema_2" >"$out.log" 2>&1 || true
  (cd "$SUITES_DIR/sqlalchemy" && PYTHONPATH=lib timeout -s INT -k 60 "$SUITE_TIMEOUT" "$DEPS/sqlalchemy-venv/bin/python" -m pytest \
      ${SQLALCHEMY_TESTS:-test/orm} --dburi "postgresql+psycopg://postgres:postgres@$host:$port/test" \
      -q -p no:randomly -p no:cacheprovider --timeout 120 --junitxml "$out.xml" ${PYTEST_ARGS:-} >>"$out.log" 2>&1) || true
  RUN_RESULT=$out.xml
}

# run_pgjdbc TARGET HOST PORT OUT: pgjdbc's JUnit 5 tests as user test,
# privileged user postgres. The classes are Gradle's selection (the JUnit
# platform's default class-name pattern, minus *Suite*), run in batches of
# PGJDBC_BATCH classes per JVM, each batch with its own report, so that a
# run cut short at SUITE_TIMEOUT keeps every batch it finished.
run_pgjdbc() {
  local target=$1 host=$2 port=$3 out=$4 d=$DEPS/pgjdbc deadline left cp n=0 batch=() c
  deadline=$(($(date +%s) + SUITE_TIMEOUT))
  rm -rf "$out.reports" && mkdir -p "$out.reports"
  : >"$out.log"
  cp="$d/classes:$(ls "$d"/lib/*.jar | grep -v console-standalone | tr '\n' :)"
  run_batch() {
    [ ${#batch[@]} -gt 0 ] || return 0
    n=$((n + 1))
    left=$((deadline - $(date +%s)))
    if [ $left -le 0 ]; then
      echo "=== batch $n: not run (SUITE_TIMEOUT): ${batch[*]}" >>"$out.log"
      batch=()
      return 0
    fi
    echo "=== batch $n: ${batch[*]}" >>"$out.log"
    local sel=() k
    for k in "${batch[@]}"; do sel+=(--select-class "$k"); done
    (cd "$SUITES_DIR/pgjdbc/pgjdbc" && timeout -k 10 "$left" java -Xmx1536m \
        -Dtest.url.PGHOST="$host" -Dtest.url.PGPORT="$port" -Dtest.url.PGDBNAME=test \
        -Duser=test -Dpassword=test -DprivilegedUser=postgres -DprivilegedPassword=postgres \
        -Dbuild.properties.relative.path="$SUITES_DIR/pgjdbc/" \
        -Duser.language=TR -Duser.country=tr \
        -jar "$d/lib/junit-platform-console-standalone-$JUNIT_PLATFORM.jar" execute \
        --class-path "$cp" "${sel[@]}" \
        --config junit.jupiter.execution.parallel.enabled=false \
        --config junit.jupiter.extensions.autodetection.enabled=true \
        --config junit.jupiter.execution.timeout.default='1 m' \
        --disable-banner --details=none --reports-dir "$out.reports/batch$n" ${JUNIT_ARGS:-} >>"$out.log" 2>&1) || true
    [ ! -f "$out.reports/batch$n/TEST-junit-jupiter.xml" ] || mv "$out.reports/batch$n/TEST-junit-jupiter.xml" "$out.reports/batch$n.xml"
    batch=()
  }
  for c in $(cd "$d/classes" && find org -name '*.class' ! -name '*$*' | sed 's/\.class$//' | tr / . |
      grep -E '(^|\.)(Test[^.]*|[^.]*Tests?)$' | grep -v 'Suite' | grep -E "${PGJDBC_CLASSES:-.}" |
      { if [ -n "${PGJDBC_EXCLUDE:-}" ]; then grep -Ev "$PGJDBC_EXCLUDE"; else cat; fi; } | sort); do
    batch+=("$c")
    [ ${#batch[@]} -lt "${PGJDBC_BATCH:-12}" ] || run_batch
  done
  run_batch
  RUN_RESULT=$out.reports
}

# run_node TARGET HOST PORT OUT: node-postgres's integration tests (pure
# JavaScript client), one process per file as its Makefile does; a file is
# one test here, failed if its process fails (it stops at its first
# failure) or outlives 120s.
run_node() {
  local target=$1 host=$2 port=$3 out=$4 f rc name
  : >"$out.tsv"
  : >"$out.log"
  local files deadline
  deadline=$(($(date +%s) + SUITE_TIMEOUT))
  files=$(cd "$SUITES_DIR/node-postgres/packages/pg" && find test/integration -name '*-tests.js' | sort)
  for f in $files; do
    name=${f#test/integration/}
    [ "$(date +%s)" -lt "$deadline" ] || continue
    rc=0
    (cd "$SUITES_DIR/node-postgres/packages/pg" && PGHOST=$host PGPORT=$port PGUSER=postgres PGPASSWORD=postgres PGDATABASE=test \
        timeout 120 node "$f" >"$out.cur" 2>&1) || rc=$?
    { echo "=== $name (exit $rc)"; cat "$out.cur"; } >>"$out.log"
    if [ $rc -eq 0 ]; then
      printf '%s\tpass\t\n' "$name" >>"$out.tsv"
    else
      printf '%s\tfail\t%s\n' "$name" "$(grep -m1 -E 'FAILED|Error|error:|did not complete' "$out.cur" | tr '\t' ' ' | cut -c1-300)" >>"$out.tsv"
    fi
  done
  rm -f "$out.cur"
  RUN_RESULT=$out.tsv
}

found=()
for s in ${SUITES:-psycopg pgjdbc node-postgres sqlalchemy}; do
  case $s in
    psycopg) [ -d "$SUITES_DIR/psycopg/tests" ] && found+=(psycopg) ;;
    pgjdbc) [ -d "$SUITES_DIR/pgjdbc/pgjdbc/src/test/java" ] && found+=(pgjdbc) ;;
    node-postgres) [ -d "$SUITES_DIR/node-postgres/packages/pg/test/integration" ] && found+=(node-postgres) ;;
    sqlalchemy) [ -d "$SUITES_DIR/sqlalchemy/test/orm" ] && found+=(sqlalchemy) ;;
    *) echo "compat-suites: unknown suite $s" >&2; exit 2 ;;
  esac
done
if [ ${#found[@]} -eq 0 ]; then
  echo "compat-suites: no suite found in $SUITES_DIR (psycopg/, pgjdbc/, node-postgres/, sqlalchemy/)" >&2
  exit 2
fi

go build -o "$RESULTS/ordo" ./cmd/ordo
go build -o "$RESULTS/suitecluster" ./test/compat/suitecluster

echo "compat-suites: $(date -u +%FT%TZ), Ordo $(git describe --always --dirty 2>/dev/null), protocol $PROTOCOL, suites: ${found[*]}"
summary=()
total_diff=0
total_dpass=0 total_opass=0
for s in "${found[@]}"; do
  case $s in
    psycopg) deps_psycopg; runner=run_psycopg ;;
    pgjdbc) deps_pgjdbc; runner=run_pgjdbc ;;
    node-postgres) deps_node; runner=run_node ;;
    sqlalchemy) deps_sqlalchemy; runner=run_sqlalchemy ;;
  esac
  start_cluster "$RESULTS/$s.cluster"
  echo "compat-suites: $s: PostgreSQL $PG_VERSION; direct on $DIRECT_HOST:$DIRECT_PORT, Ordo node 1 on 127.0.0.1:${OPORTS[0]}"
  t0=$(date +%s)
  $runner direct "$DIRECT_HOST" "$DIRECT_PORT" "$RESULTS/$s.direct"; direct_res=$RUN_RESULT
  t1=$(date +%s)
  $runner ordo 127.0.0.1 "${OPORTS[0]}" "$RESULTS/$s.ordo"; ordo_res=$RUN_RESULT
  t2=$(date +%s)
  for i in 1 2 3; do cp "$RESULTS/$s.cluster/node$i.log" "$RESULTS/$s.node$i.log" 2>/dev/null || true; done
  stop_cluster
  read -r dp df ds <<<"$(python3 scripts/compat-suites-report.py count "$direct_res")"
  read -r op of os <<<"$(python3 scripts/compat-suites-report.py count "$ordo_res")"
  python3 scripts/compat-suites-report.py diff "$direct_res" "$ordo_res" >"$RESULTS/$s.differences"
  nd=$(grep -c '^ORDO-\(FAIL\|SKIP\)' "$RESULTS/$s.differences" || true)
  nr=$(grep -c '^ORDO-MISSING' "$RESULTS/$s.differences" || true)
  total_diff=$((total_diff + nd))
  total_dpass=$((total_dpass + dp)) total_opass=$((total_opass + op))
  line=$(printf '%-14s direct: pass %5d fail %4d skip %4d (%ds)   ordo: pass %5d fail %4d skip %4d (%ds)   pass direct, not through Ordo: %d (+%d not run)' \
    "$s" "$dp" "$df" "$ds" $((t1 - t0)) "$op" "$of" "$os" $((t2 - t1)) "$nd" "$nr")
  echo "$line"
  summary+=("$line")
  if [ "$nd" -gt 0 ]; then
    echo "  (list: $RESULTS/$s.differences; output: $RESULTS/$s.ordo.log; node logs: $RESULTS/$s.node*.log)"
  fi
done
echo
for l in "${summary[@]}"; do echo "$l"; done
echo "RESULT suites=${#found[@]} direct_pass=$total_dpass ordo_pass=$total_opass differences=$total_diff"
