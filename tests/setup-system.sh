#!/usr/bin/env bash
# Debian packages the test suite runs for real: sshd (ssh launcher), Chromium (dashboard and
# report pages), PostgreSQL (distributed studies), systemd-analyze (unit verification),
# ps/ss (remote process and port checks). Installs only what is missing.
set -euo pipefail
need=()
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
[ -x /usr/bin/chromium ] || need+=(chromium)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v ps >/dev/null || need+=(procps)
command -v ss >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
fi
