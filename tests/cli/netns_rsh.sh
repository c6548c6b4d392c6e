#!/bin/sh
# OpenMPI's remote shell between the test hosts of hosts.sh (its plm_rsh_agent):
# called as `netns_rsh.sh ADDRESS COMMAND...`, as ssh would be, it runs COMMAND
# (OpenMPI's orted) in the network namespace of the host with that address,
# under that host's name. TESSERA_HOSTS lists "address=namespace=name ...".
set -eu
address=$1
shift
for entry in ${TESSERA_HOSTS:-}; do
  if [ "${entry%%=*}" = "$address" ]; then
    rest=${entry#*=}
    exec nsenter --net="/var/run/netns/${rest%%=*}" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "${rest#*=}" "$*"
  fi
done
echo "netns_rsh.sh: no test host has the address '$address' (TESSERA_HOSTS: ${TESSERA_HOSTS:-unset})" >&2
exit 255
