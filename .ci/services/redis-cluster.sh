# .ci/services/redis-cluster.sh: start a local 3-master Redis Cluster (no replicas, no
# persistence) on loopback for millrace's Redis Cluster tests, with the machine's redis-server.
#
# SOURCE it with bash from the repository root (.ci/test does):
#
#     . .ci/services/redis-cluster.sh && go test ./adapters/redisstream/...
#
# Ports: MILLRACE_REDIS_CLUSTER_PORTS, default "17001 17002 17003", bound to 127.0.0.1 only
# (the cluster bus listens on port+10000, also loopback). Node files (nodes.conf, log, pid) in
# /tmp/millrace-redis-cluster/<port>. If the nodes already answer and the cluster state is ok it
# only exports the variable; nodes that answer but form no cluster are joined with
# `redis-cli --cluster create`. It exports MILLRACE_REDIS_CLUSTER_ADDRS (comma-separated
# host:port seeds). It never calls exit (it is sourced): on failure it prints why and returns 1.
# It is safe under `set -euo pipefail`.
#
# cluster-node-timeout is 2000 ms so that a test that stops a node sees the cluster fail and
# recover within seconds, not the default 15 s.
#
# Stop it with: for p in 17001 17002 17003; do redis-cli -p $p shutdown nosave; done

millrace_redis_cluster_start() {
	local ports="${MILLRACE_REDIS_CLUSTER_PORTS:-17001 17002 17003}"
	local base=/tmp/millrace-redis-cluster
	local p addrs="" seeds=()
	for p in $ports; do
		seeds+=("127.0.0.1:$p")
		addrs="${addrs:+$addrs,}127.0.0.1:$p"
	done

	if [ "$(redis-cli -h 127.0.0.1 -p "${seeds[0]##*:}" cluster info 2>/dev/null | tr -d '\r' | grep '^cluster_state:')" = "cluster_state:ok" ]; then
		export MILLRACE_REDIS_CLUSTER_ADDRS="$addrs"
		echo "redis-cluster.sh: a cluster already answers on $addrs"
		return 0
	fi

	for p in $ports; do
		if redis-cli -h 127.0.0.1 -p "$p" ping >/dev/null 2>&1; then
			continue
		fi
		mkdir -p "$base/$p" || return 1
		# A node file from an earlier cluster whose nodes were all stopped names peers that no
		# longer hold its slots' data: start fresh.
		rm -f "$base/$p/nodes.conf"
		redis-server --port "$p" --bind 127.0.0.1 --protected-mode yes \
			--cluster-enabled yes --cluster-config-file "$base/$p/nodes.conf" \
			--cluster-node-timeout 2000 --save "" --appendonly no \
			--dir "$base/$p" --logfile "$base/$p/redis.log" --pidfile "$base/$p/redis.pid" \
			--daemonize yes || {
			echo "redis-cluster.sh: redis-server on 127.0.0.1:$p did not start; log $base/$p/redis.log" >&2
			return 1
		}
	done
	local i
	for p in $ports; do
		for ((i = 0; i < 100; i++)); do
			redis-cli -h 127.0.0.1 -p "$p" ping >/dev/null 2>&1 && break
			sleep 0.1
		done
		if ! redis-cli -h 127.0.0.1 -p "$p" ping >/dev/null 2>&1; then
			echo "redis-cluster.sh: 127.0.0.1:$p does not answer PING; log $base/$p/redis.log" >&2
			return 1
		fi
	done

	local known
	known="$(redis-cli -h 127.0.0.1 -p "${seeds[0]##*:}" cluster info 2>/dev/null | tr -d '\r' | grep '^cluster_known_nodes:' | cut -d: -f2)"
	if [ "${known:-1}" -lt "${#seeds[@]}" ]; then
		echo "redis-cluster.sh: creating the cluster on $addrs"
		if ! redis-cli --cluster create "${seeds[@]}" --cluster-replicas 0 --cluster-yes >"$base/create.log" 2>&1; then
			echo "redis-cluster.sh: redis-cli --cluster create failed; $base/create.log:" >&2
			tail -n 20 "$base/create.log" >&2
			return 1
		fi
	fi
	for ((i = 0; i < 300; i++)); do
		local ok=1
		for p in $ports; do
			[ "$(redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | tr -d '\r' | grep '^cluster_state:')" = "cluster_state:ok" ] || ok=0
		done
		if [ "$ok" = 1 ]; then
			export MILLRACE_REDIS_CLUSTER_ADDRS="$addrs"
			echo "redis-cluster.sh: cluster ok on $addrs"
			return 0
		fi
		sleep 0.1
	done
	echo "redis-cluster.sh: the cluster on $addrs did not reach cluster_state:ok within 30 s" >&2
	return 1
}

millrace_redis_cluster_start
