# .ci/services/kafka.sh: start the local Kafka-protocol cluster (kfake, 3 brokers) for millrace's
# Kafka adapter tests.
#
# SOURCE it with bash from the repository root (.ci/run does):
#
#     . .ci/services/kafka.sh && go test ./adapters/kafka/...
#
# It builds tools/kfakebroker (its own Go module, pinned versions from its go.sum), starts it in
# the background on 127.0.0.1 only, waits until every broker and the admin endpoint accept
# connections (at most MILLRACE_KAFKA_WAIT seconds, default 30) and exports:
#
#     MILLRACE_KAFKA_BROKERS  127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094
#     MILLRACE_KAFKA_ADMIN    127.0.0.1:19095 (kfakebroker's admin HTTP endpoint: move leaders)
#
# If a broker already listens on the first port it starts nothing and exports the brokers that
# listen (an older one-broker kfake on 19092 gives MILLRACE_KAFKA_BROKERS=127.0.0.1:19092), and
# MILLRACE_KAFKA_ADMIN only if the admin port listens. It never calls exit (it is sourced): on
# failure it prints why and returns 1. It is safe under `set -euo pipefail`.
#
# Files: pid in /tmp/millrace-kfake.pid, log in /tmp/millrace-kfake.log, binary in
# /tmp/millrace-kfake/kfakebroker. Ports: MILLRACE_KFAKE_PORT (first broker, default 19092),
# MILLRACE_KFAKE_BROKERS (count, default 3; broker i on port+i), MILLRACE_KFAKE_ADMIN_PORT
# (default port+count). Stop it with: kill "$(cat /tmp/millrace-kfake.pid)"

millrace_kafka_port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# millrace_kafka_listening PORT COUNT: the comma-separated addresses of the brokers that listen,
# from PORT up, stopping at the first that does not.
millrace_kafka_listening() {
	local port="$1" count="$2" i list=""
	for ((i = 0; i < count; i++)); do
		millrace_kafka_port_open "$((port + i))" || break
		list="${list:+$list,}127.0.0.1:$((port + i))"
	done
	echo "$list"
}

millrace_kafka_start() {
	local port="${MILLRACE_KFAKE_PORT:-19092}"
	local count="${MILLRACE_KFAKE_BROKERS:-3}"
	local admin_port="${MILLRACE_KFAKE_ADMIN_PORT:-$((port + count))}"
	local pidfile=/tmp/millrace-kfake.pid
	local logfile=/tmp/millrace-kfake.log
	local bin=/tmp/millrace-kfake/kfakebroker
	local wait_s="${MILLRACE_KAFKA_WAIT:-30}"
	local dir all="" i
	dir="$(pwd)/tools/kfakebroker"
	for ((i = 0; i < count; i++)); do
		all="${all:+$all,}127.0.0.1:$((port + i))"
	done

	if millrace_kafka_port_open "$port"; then
		export MILLRACE_KAFKA_BROKERS
		MILLRACE_KAFKA_BROKERS="$(millrace_kafka_listening "$port" "$count")"
		if millrace_kafka_port_open "$admin_port"; then
			export MILLRACE_KAFKA_ADMIN="127.0.0.1:$admin_port"
		else
			unset MILLRACE_KAFKA_ADMIN
		fi
		echo "kafka.sh: brokers already listen on $MILLRACE_KAFKA_BROKERS (admin: ${MILLRACE_KAFKA_ADMIN:-none})"
		return 0
	fi
	if [ ! -f "$dir/go.mod" ]; then
		echo "kafka.sh: $dir/go.mod not found; source this script from the repository root" >&2
		return 1
	fi
	echo "kafka.sh: building tools/kfakebroker"
	if ! (cd "$dir" && go build -buildvcs=false -o "$bin" .); then
		echo "kafka.sh: go build failed in $dir" >&2
		return 1
	fi

	# setsid: the cluster outlives the sourcing shell's job control and is not killed with it.
	setsid "$bin" -port "$port" -brokers "$count" -admin-port "$admin_port" >"$logfile" 2>&1 </dev/null &
	echo $! >"$pidfile"
	local pid
	pid="$(cat "$pidfile")"

	local deadline=$((SECONDS + wait_s))
	until [ "$(millrace_kafka_listening "$port" "$count")" = "$all" ] && millrace_kafka_port_open "$admin_port"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "kafka.sh: kfakebroker (pid $pid) exited; log $logfile:" >&2
			tail -n 20 "$logfile" >&2
			rm -f "$pidfile"
			return 1
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "kafka.sh: kfakebroker (pid $pid) did not listen on $all and admin port $admin_port within ${wait_s}s; log $logfile" >&2
			return 1
		fi
		sleep 0.1
	done
	export MILLRACE_KAFKA_BROKERS="$all"
	export MILLRACE_KAFKA_ADMIN="127.0.0.1:$admin_port"
	echo "kafka.sh: kfakebroker (pid $pid) listens on $all (admin 127.0.0.1:$admin_port)"
}

millrace_kafka_start
