#!/usr/bin/env bash
# Makes a real Prometheus (the server and promtool) available to the e2e
# test that scrapes a running EPP and site-relay (test/e2e/prometheus_test.go)
# and prints the folder that holds both binaries.
#
#   export SWITCHYARD_PROMETHEUS_DIR=$(hack/prometheus.sh)
#
# When prometheus and promtool are on PATH already, nothing is installed.
# Otherwise Debian's `prometheus` package is installed with apt-get (needs
# root; non-interactive, no recommended packages). The package ships a
# systemd unit and would start a service where an init system runs: the
# policy-rc.d below refuses every service start during the install, and the
# unit is disabled after it, so no Prometheus but the test's ever runs.
# Progress goes to stderr; stdout carries only the folder.
set -euo pipefail

if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  dirname "$(command -v prometheus)"
  exit 0
fi

if ! command -v apt-get >/dev/null; then
  echo "prometheus.sh: prometheus/promtool missing and no apt-get to install Debian's package" >&2
  exit 1
fi
sudo=()
if [[ $(id -u) != 0 ]]; then
  sudo=(sudo -n)
fi

start=$SECONDS
# policy-rc.d exit 101: "action forbidden", honoured by invoke-rc.d and
# deb-systemd-invoke, so the package's postinst starts nothing.
policy=/usr/sbin/policy-rc.d
restore=""
if [[ -e $policy ]]; then
  restore=$(mktemp)
  "${sudo[@]}" cp -p "$policy" "$restore"
fi
cleanup() {
  if [[ -n $restore ]]; then
    "${sudo[@]}" cp -p "$restore" "$policy"
    rm -f "$restore"
  else
    "${sudo[@]}" rm -f "$policy"
  fi
}
trap cleanup EXIT
printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
"${sudo[@]}" chmod 0755 "$policy"

export DEBIAN_FRONTEND=noninteractive
# The package lists may be missing on a fresh image; update only then.
if ! apt-cache show prometheus >/dev/null 2>&1; then
  "${sudo[@]}" apt-get update -q >&2
fi
"${sudo[@]}" apt-get install -y -q --no-install-recommends prometheus >&2
# Where systemd is the init system, keep the unit from starting at boot.
if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
  "${sudo[@]}" systemctl disable --now prometheus >&2 || true
fi
echo "prometheus.sh: installed $(prometheus --version 2>&1 | head -1) in $((SECONDS - start))s" >&2

dirname "$(command -v prometheus)"
