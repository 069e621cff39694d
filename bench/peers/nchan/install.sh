#!/bin/sh
# Installs what `herald-bench compare` needs for its Nchan peer, from Debian's packages:
# nginx-light and libnginx-mod-nchan. The bench runs its own nginx on a port and in a
# directory of its own; it never uses the machine's nginx.
set -eu
if [ -x /usr/sbin/nginx ] && [ -f /usr/lib/nginx/modules/ngx_nchan_module.so ]; then
    exit 0
fi
SUDO=
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    nginx-light libnginx-mod-nchan
