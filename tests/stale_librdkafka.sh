#!/usr/bin/env bash
# librdkafka decides once, when cargo first builds rdkafka-sys, whether
# libcurl's headers are there (OAUTHBEARER's OIDC flow needs them), and
# cargo never builds it again when they arrive later: `cargo run -- demo`
# before `tests/run.sh` left a librdkafka without OIDC that the suite then
# used. tests/run.sh calls this after its installs: each librdkafka build
# in the target directory made without libcurl, where libcurl is now
# there, is cleaned, so the next cargo command builds it with OIDC.
#
# Reads CARGO_TARGET_DIR (default: target) and runs `cargo clean`; prints
# what it cleaned. Exit 0 unless cleaning fails.
set -euo pipefail
target="${CARGO_TARGET_DIR:-target}"
if ! pkg-config --exists libcurl 2> /dev/null; then
  exit 0
fi
for header in "$target"/*/build/rdkafka-sys-*/out/config.h; do
  [ -f "$header" ] || continue
  grep -q '^#define WITH_CURL 1' "$header" && continue
  # target/<profile dir>/build/rdkafka-sys-<hash>/out/config.h
  dir=$(basename "$(dirname "$(dirname "$(dirname "$(dirname "$header")")")")")
  case "$dir" in
    debug) profile=dev ;;
    *) profile="$dir" ;;
  esac
  echo "== librdkafka in $target/$dir was built before libcurl was installed: cleaning it (profile $profile) so it is rebuilt with OIDC"
  cargo clean --quiet -p rdkafka-sys --profile "$profile"
done
