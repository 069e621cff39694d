#!/bin/sh
# Installs what `herald-bench compare` needs for its RabbitMQ Web STOMP peer, from Debian's
# packages: rabbitmq-server (its rabbitmq_web_stomp plugin included). The bench runs a node
# of its own (its own name, ports and files); it never uses the machine's broker.
set -eu
if [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    exit 0
fi
SUDO=
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends rabbitmq-server
