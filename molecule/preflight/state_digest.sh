#!/bin/sh
# What an upgrade would change on a host, as one listing: packages, the CUDA
# links, the venvs, the unit and its drop-ins, the upgrade's state directory.
dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\n' | sort
for link in /usr/local/cuda /usr/local/cuda-12 /usr/local/cuda-13; do
  printf '%s -> %s\n' "$link" "$(readlink -f "$link" 2>/dev/null)"
done
ls -la /opt /etc/systemd/system /etc/systemd/system/sglang.service.d /var/lib/cuda13-upgrade 2>&1 | sed 's/ [A-Z][a-z][a-z] [ 0-9][0-9] [0-9:]\{4,5\} / /'
/opt/ml-env/bin/python -m pip freeze --all --isolated 2>&1
systemctl cat sglang.service 2>&1
