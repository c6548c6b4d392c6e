# Several "hosts" on one machine, for jobs that cross a network (sourced by
# multihost_test.sh; needs root, iproute2 and util-linux's nsenter and unshare).
#
# Each host is a network namespace with one veth link to a bridge, which sits in
# a namespace of its own, so nothing is added to the machine's own network and
# no packet leaves it. Commands enter a namespace with nsenter, not `ip netns
# exec` or `ip -n`, which remount / and so fail in a chroot (as in CI's bare
# Debian). A host also gets its own host name (a UTS namespace), so
# OpenMPI sees separate nodes: between hosts its only transport is TCP over the
# veth links, as between real machines; processes of one host share memory.
#
#   hosts_up N            makes hosts 0..N-1 (addresses in host_addr[i]) or
#                         returns 1 with the reason in $hosts_error
#   on_host I CMD...      runs CMD on host I
#   hosts_mpirun ARGS...  mpirun from host 0 over every host, OpenMPI's
#                         launcher entering each host through netns_rsh.sh
#   host_bytes I          bytes sent and received by host I's link so far
#   hosts_down            removes them, ending what still runs there

hosts_subnet=10.251.7    # private, and only inside the namespaces made here
hosts_prefix=tessera-h   # namespace names: tessera-h<pid>-<i>, tessera-h<pid>-switch
hosts_made=()            # namespaces made so far, for hosts_down

in_namespace() {  # in_namespace NAMESPACE CMD...
  nsenter --net="/var/run/netns/$1" "${@:2}"
}

# A test killed before its clean-up leaves namespaces behind: remove those of
# processes that no longer exist.
hosts_remove_stale() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$hosts_prefix[0-9]*-" || true); do
    pid=${ns#"$hosts_prefix"}; pid=${pid%%-*}
    kill -0 "$pid" 2>/dev/null || hosts_delete_namespace "$ns"
  done
}

hosts_delete_namespace() {
  local pids
  pids=$(ip netns pids "$1" 2>/dev/null || true)
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  ip netns delete "$1" 2>/dev/null || true
}

hosts_up() {
  local n=$1 i ns switch out
  hosts_ns=() host_addr=() host_name=()
  if [ "$(id -u)" != 0 ]; then hosts_error="network namespaces need root (uid $(id -u))"; return 1; fi
  command -v ip > /dev/null || { hosts_error="no 'ip' command (Debian's iproute2)"; return 1; }
  command -v nsenter > /dev/null || { hosts_error="no 'nsenter' command (util-linux)"; return 1; }
  hosts_remove_stale
  switch="$hosts_prefix$$-switch"
  hosts_made=("$switch")
  out=$( {
    ip netns add "$switch" &&
    in_namespace "$switch" ip link add br0 type bridge &&
    in_namespace "$switch" ip link set br0 up
  } 2>&1 ) || { hosts_error="cannot make a network namespace with a bridge: $out"; hosts_down; return 1; }
  for ((i = 0; i < n; i++)); do
    ns="$hosts_prefix$$-$i"
    hosts_made+=("$ns")
    out=$( {
      ip netns add "$ns" &&
      in_namespace "$ns" ip link add eth0 type veth peer name "port$i" netns "$switch" &&
      in_namespace "$switch" ip link set "port$i" master br0 &&
      in_namespace "$switch" ip link set "port$i" up &&
      in_namespace "$ns" ip addr add "$hosts_subnet.$((i + 1))/24" dev eth0 &&
      in_namespace "$ns" ip link set eth0 up &&
      in_namespace "$ns" ip link set lo up
    } 2>&1 ) || { hosts_error="cannot link host $i to the bridge: $out"; hosts_down; return 1; }
    hosts_ns+=("$ns")
    host_addr+=("$hosts_subnet.$((i + 1))")
    host_name+=("host$i")
  done
  # The rsh agent finds a host's namespace and name by its address.
  TESSERA_HOSTS=""
  for ((i = 0; i < n; i++)); do TESSERA_HOSTS+="${host_addr[i]}=${hosts_ns[i]}=${host_name[i]} "; done
  export TESSERA_HOSTS
  # A link is up once its address answers: wait for the bridge to forward.
  for ((i = 1; i < n; i++)); do
    on_host 0 bash -c "for _ in \$(seq 50); do (: < /dev/tcp/${host_addr[i]}/1) 2>&1 | grep -q refused && exit 0; sleep 0.1; done; exit 1" ||
      { hosts_error="host $i does not answer host 0 over the bridge"; hosts_down; return 1; }
  done
}

on_host() {
  local i=$1; shift
  in_namespace "${hosts_ns[i]}" unshare --uts sh -c 'hostname "$0" && exec "$@"' "${host_name[i]}" "$@"
}

hosts_mpirun() {
  local spec="" i
  for ((i = 0; i < ${#hosts_ns[@]}; i++)); do spec+="${spec:+,}${host_addr[i]}:2"; done
  on_host 0 "$hosts_mpirun_binary" --allow-run-as-root --oversubscribe --host "$spec" \
    --mca plm_rsh_agent "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/netns_rsh.sh" \
    --mca btl self,vader,tcp --mca btl_tcp_if_include "$hosts_subnet.0/24" \
    --mca oob_tcp_if_include "$hosts_subnet.0/24" "$@"
}

host_bytes() {  # received + sent on host I's link
  in_namespace "${hosts_ns[$1]}" awk '$1 == "eth0:" {print $2 + $10}' /proc/net/dev
}

hosts_down() {
  local ns
  for ns in "${hosts_made[@]}"; do hosts_delete_namespace "$ns"; done
  hosts_made=()
  # With no namespace left, undo the mount `ip netns add` makes of /run/netns:
  # the test leaves nothing mounted (a chroot around it can then be removed).
  local tries
  if [ -z "$(ip netns list 2>/dev/null)" ]; then
    for tries in 1 2 3; do mountpoint -q /run/netns 2>/dev/null && umount /run/netns 2>/dev/null || break; done
  fi
}
