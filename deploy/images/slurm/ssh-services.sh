#!/usr/bin/env bash
# Sourced by the login and slurmd entry points: with SSHD=1 (the operator sets it on a LoginSet's pods, and on a
# NodeSet's with ssh.enabled) sshd runs beside the pod's daemon, as in upstream's login image, reading the
# operator's /etc/ssh/sshd_config and the host keys it mounts, or making its own when none are mounted (a
# NodeSet's pods). sssd runs too when the image has it and /etc/sssd/sssd.conf is mounted (the sssdConfRef
# Secret); these images have none (Debian forky's archive has no sssd today: docs/images.md). tini -g, the
# pod's init, forwards a stop signal to them (same process group) and reaps them.
start_ssh_services() {
  [ "${SSHD:-0}" = 1 ] || return 0
  if command -v sssd >/dev/null && [ -s /etc/sssd/sssd.conf ]; then
    mkdir -p /var/lib/sss/db /var/lib/sss/pipes/private /var/lib/sss/mc /var/log/sssd
    sssd -i --logger=stderr &
  fi
  if ! ls /etc/ssh/ssh_host_*_key >/dev/null 2>&1; then ssh-keygen -A >/dev/null; fi
  mkdir -p /run/sshd
  /usr/sbin/sshd -D -e &
}
