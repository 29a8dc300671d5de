# .ci/services/redis-cluster.sh: start a local 3-master Redis Cluster (no replicas, no
# persistence) on loopback for millrace's Redis Cluster tests, with the machine's redis-server.
#
# SOURCE it with bash from the repository root (.ci/test does):
#
#     . .ci/services/redis-cluster.sh && go test ./adapters/redisstream/...
#
# Ports: MILLRACE_REDIS_CLUSTER_PORTS, default "17001 17002 17003", bound to 127.0.0.1 only
# (the cluster bus listens on port+10000, also loopback). Node files (nodes.conf, log, pid) in
# /tmp/millrace-redis-cluster/<port>. It exports MILLRACE_REDIS_CLUSTER_ADDRS (comma-separated
# host:port seeds). It never calls exit (it is sourced): on failure it prints why and returns 1.
# It is safe under `set -euo pipefail`.
#
# What it does, under a lock (/tmp/millrace-redis-cluster/lock, flock) so that two shells
# sourcing it at once do not create, or reset, the cluster under each other:
#   - every node answers with cluster_state:ok: it only exports the variable;
#   - it starts (daemonized, fresh node file) every node that does not answer;
#   - nodes that are all empty and alone (cluster_known_nodes 1, no slot) are joined with
#     `redis-cli --cluster create`;
#   - nodes that know each other and hold all 16384 slots get 10 s to reach cluster_state:ok;
#   - anything else, or a cluster that stays not ok, is a broken cluster (a node restarted
#     without its node file, slots unassigned, a node that forgot its peers): on each of its
#     ports on 127.0.0.1 it runs FLUSHALL and CLUSTER RESET HARD (the test data is lost), and
#     creates the cluster again.
# It creates or resets only nodes it started itself: a node whose CONFIG GET dir is not its
# own /tmp/millrace-redis-cluster/<port>, or that is not cluster-enabled (a Redis of yours on
# one of the ports), makes it stop with a message before it writes anything to any node.
# Then it waits up to 30 s for cluster_state:ok on every node.
#
# cluster-node-timeout is 2000 ms so that a test that stops a node sees the cluster fail and
# recover within seconds, not the default 15 s.
#
# Stop it with: for p in 17001 17002 17003; do redis-cli -p $p shutdown nosave; done

# millrace_redis_cluster_info PORT FIELD prints FIELD of CLUSTER INFO on 127.0.0.1:PORT (empty
# when the node does not answer).
millrace_redis_cluster_info() {
	redis-cli -h 127.0.0.1 -p "$1" cluster info 2>/dev/null | tr -d '\r' | sed -n "s/^$2://p" || true
}

# millrace_redis_cluster_all_ok PORTS... succeeds when every node reports cluster_state:ok.
millrace_redis_cluster_all_ok() {
	local p
	for p in "$@"; do
		[ "$(millrace_redis_cluster_info "$p" cluster_state)" = ok ] || return 1
	done
}

millrace_redis_cluster_start() {
	local ports="${MILLRACE_REDIS_CLUSTER_PORTS:-17001 17002 17003}"
	local base=/tmp/millrace-redis-cluster
	local p addrs="" seeds=() portlist=()
	for p in $ports; do
		seeds+=("127.0.0.1:$p")
		portlist+=("$p")
		addrs="${addrs:+$addrs,}127.0.0.1:$p"
	done
	local n=${#portlist[@]}

	if millrace_redis_cluster_all_ok "${portlist[@]}"; then
		export MILLRACE_REDIS_CLUSTER_ADDRS="$addrs"
		echo "redis-cluster.sh: a cluster already answers on $addrs"
		return 0
	fi

	for p in "${portlist[@]}"; do
		if redis-cli -h 127.0.0.1 -p "$p" ping >/dev/null 2>&1; then
			continue
		fi
		mkdir -p "$base/$p" || return 1
		# A node file from an earlier cluster whose nodes were all stopped names peers that no
		# longer hold its slots' data: start fresh.
		rm -f "$base/$p/nodes.conf"
		# 9>&-: the daemon must not keep the lock's descriptor open.
		redis-server --port "$p" --bind 127.0.0.1 --protected-mode yes \
			--cluster-enabled yes --cluster-config-file "$base/$p/nodes.conf" \
			--cluster-node-timeout 2000 --save "" --appendonly no \
			--dir "$base/$p" --logfile "$base/$p/redis.log" --pidfile "$base/$p/redis.pid" \
			--daemonize yes 9>&- || {
			echo "redis-cluster.sh: redis-server on 127.0.0.1:$p did not start; log $base/$p/redis.log" >&2
			return 1
		}
	done
	local i
	for p in "${portlist[@]}"; do
		for ((i = 0; i < 100; i++)); do
			redis-cli -h 127.0.0.1 -p "$p" ping >/dev/null 2>&1 && break
			sleep 0.1
		done
		if ! redis-cli -h 127.0.0.1 -p "$p" ping >/dev/null 2>&1; then
			echo "redis-cluster.sh: 127.0.0.1:$p does not answer PING; log $base/$p/redis.log" >&2
			return 1
		fi
	done

	# Never create or reset a node this script did not start: its data directory is the
	# script's own, and it runs with cluster support.
	local dir
	for p in "${portlist[@]}"; do
		dir="$(redis-cli -h 127.0.0.1 -p "$p" config get dir 2>/dev/null | tr -d '\r' | sed -n 2p)"
		if [ "$dir" != "$base/$p" ] || [ "$(redis-cli -h 127.0.0.1 -p "$p" info cluster 2>/dev/null | tr -d '\r' | sed -n 's/^cluster_enabled://p')" != 1 ]; then
			echo "redis-cluster.sh: 127.0.0.1:$p is a Redis this script did not start (dir ${dir:-unknown}, want $base/$p, cluster-enabled): not touching it; stop it or set MILLRACE_REDIS_CLUSTER_PORTS to free ports" >&2
			return 1
		fi
	done

	# fresh: every node alone and without slots; formed: every node knows all and all slots
	# are assigned.
	local fresh=1 formed=1 known slots
	for p in "${portlist[@]}"; do
		known="$(millrace_redis_cluster_info "$p" cluster_known_nodes)"
		slots="$(millrace_redis_cluster_info "$p" cluster_slots_assigned)"
		[ "$known" = 1 ] && [ "$slots" = 0 ] || fresh=0
		[ "$known" = "$n" ] && [ "$slots" = 16384 ] || formed=0
	done
	local create=$fresh
	if [ "$fresh" = 0 ]; then
		local settled=0
		if [ "$formed" = 1 ]; then
			for ((i = 0; i < 100; i++)); do
				if millrace_redis_cluster_all_ok "${portlist[@]}"; then
					settled=1
					break
				fi
				sleep 0.1
			done
		fi
		if [ "$settled" = 0 ]; then
			echo "redis-cluster.sh: the nodes on $addrs form no working cluster; resetting them (FLUSHALL, CLUSTER RESET HARD) and creating it again"
			local out
			for p in "${portlist[@]}"; do
				redis-cli -h 127.0.0.1 -p "$p" flushall >/dev/null 2>&1 || true
				out="$(redis-cli -h 127.0.0.1 -p "$p" cluster reset hard 2>&1 | tr -d '\r')"
				if [ "$out" != OK ]; then
					echo "redis-cluster.sh: CLUSTER RESET HARD on 127.0.0.1:$p: $out" >&2
					return 1
				fi
			done
			create=1
		fi
	fi
	if [ "$create" = 1 ]; then
		echo "redis-cluster.sh: creating the cluster on $addrs"
		if ! redis-cli --cluster create "${seeds[@]}" --cluster-replicas 0 --cluster-yes >"$base/create.log" 2>&1; then
			echo "redis-cluster.sh: redis-cli --cluster create failed; $base/create.log:" >&2
			tail -n 20 "$base/create.log" >&2
			return 1
		fi
	fi
	for ((i = 0; i < 300; i++)); do
		if millrace_redis_cluster_all_ok "${portlist[@]}"; then
			export MILLRACE_REDIS_CLUSTER_ADDRS="$addrs"
			echo "redis-cluster.sh: cluster ok on $addrs"
			return 0
		fi
		sleep 0.1
	done
	echo "redis-cluster.sh: the cluster on $addrs did not reach cluster_state:ok within 30 s" >&2
	return 1
}

# millrace_redis_cluster_locked runs millrace_redis_cluster_start holding the lock (fd 9),
# or without one where flock is missing.
millrace_redis_cluster_locked() {
	mkdir -p /tmp/millrace-redis-cluster || return 1
	if ! command -v flock >/dev/null 2>&1; then
		millrace_redis_cluster_start
		return
	fi
	{
		flock -w 120 9 || {
			echo "redis-cluster.sh: another shell holds /tmp/millrace-redis-cluster/lock for over 120 s" >&2
			return 1
		}
		millrace_redis_cluster_start
	} 9>/tmp/millrace-redis-cluster/lock
}

millrace_redis_cluster_locked
