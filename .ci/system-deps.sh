#!/usr/bin/env bash
# Installs the Debian packages the tests run for real: prometheus (+promtool) and chromium.
# Only when missing and only as root; otherwise says what the skipped tests will need.
set -euo pipefail
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
[ -x /usr/bin/chromium ] || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: not root or no apt-get; tests needing ${need[*]} will be skipped" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${need[@]}" | sort -u) >/dev/null
echo "system-deps: installed $(printf '%s ' "${need[@]}" | tr ' ' '\n' | sort -u | tr '\n' ' ')"
