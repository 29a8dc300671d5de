# .ci/services/kafka.sh: start the local Kafka-protocol broker (kfake) for millrace's Kafka
# adapter tests.
#
# SOURCE it with bash from the repository root (.ci/run does):
#
#     . .ci/services/kafka.sh && go test ./adapters/kafka/...
#
# It builds tools/kfakebroker (its own Go module, pinned versions from its go.sum), starts it in
# the background on 127.0.0.1 only, waits until the port accepts connections (at most
# MILLRACE_KAFKA_WAIT seconds, default 30) and exports MILLRACE_KAFKA_BROKERS. If a broker already
# listens on the port it only exports the variable. It never calls exit (it is sourced): on
# failure it prints why and returns 1. It is safe under `set -euo pipefail`.
#
# Files: pid in /tmp/millrace-kfake.pid, log in /tmp/millrace-kfake.log, binary in
# /tmp/millrace-kfake/kfakebroker. Port: MILLRACE_KFAKE_PORT, default 19092.
# Stop it with: kill "$(cat /tmp/millrace-kfake.pid)"

millrace_kafka_port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

millrace_kafka_start() {
	local port="${MILLRACE_KFAKE_PORT:-19092}"
	local addr="127.0.0.1:${port}"
	local pidfile=/tmp/millrace-kfake.pid
	local logfile=/tmp/millrace-kfake.log
	local bin=/tmp/millrace-kfake/kfakebroker
	local wait_s="${MILLRACE_KAFKA_WAIT:-30}"
	local dir
	dir="$(pwd)/tools/kfakebroker"

	if millrace_kafka_port_open "$port"; then
		export MILLRACE_KAFKA_BROKERS="$addr"
		echo "kafka.sh: a broker already listens on $addr"
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

	# setsid: the broker outlives the sourcing shell's job control and is not killed with it.
	setsid "$bin" -port "$port" >"$logfile" 2>&1 </dev/null &
	echo $! >"$pidfile"
	local pid
	pid="$(cat "$pidfile")"

	local deadline=$((SECONDS + wait_s))
	until millrace_kafka_port_open "$port"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "kafka.sh: kfakebroker (pid $pid) exited; log $logfile:" >&2
			tail -n 20 "$logfile" >&2
			rm -f "$pidfile"
			return 1
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "kafka.sh: kfakebroker (pid $pid) did not listen on $addr within ${wait_s}s; log $logfile" >&2
			return 1
		fi
		sleep 0.1
	done
	export MILLRACE_KAFKA_BROKERS="$addr"
	echo "kafka.sh: kfakebroker (pid $pid) listens on $addr"
}

millrace_kafka_start
