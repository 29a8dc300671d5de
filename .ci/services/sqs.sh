# .ci/services/sqs.sh: start the local SQS endpoint (fauxqs) for millrace's SQS adapter tests.
#
# SOURCE it with bash from the repository root (.ci/run does):
#
#     . .ci/services/sqs.sh && go test ./adapters/sqs/...
#
# It installs fauxqs and a Node 22 binary from tools/fauxqs/package-lock.json (npm ci, pinned
# versions and integrity hashes; nothing else is downloaded), starts the endpoint in the
# background on 127.0.0.1 only, waits until it answers (at most MILLRACE_SQS_WAIT seconds,
# default 60) and exports MILLRACE_SQS_ENDPOINT. If the endpoint already answers it only exports
# the variable. It never calls exit (it is sourced): on failure it prints why and returns 1.
#
# Files: pid in /tmp/millrace-fauxqs.pid (node's own pid), log in /tmp/millrace-fauxqs.log.
# Stop it with: kill "$(cat /tmp/millrace-fauxqs.pid)"
# Port: MILLRACE_FAUXQS_PORT, default 19324.

millrace_sqs_start() {
	local port="${MILLRACE_FAUXQS_PORT:-19324}"
	local endpoint="http://127.0.0.1:${port}"
	local pidfile=/tmp/millrace-fauxqs.pid
	local logfile=/tmp/millrace-fauxqs.log
	local wait_s="${MILLRACE_SQS_WAIT:-60}"
	local dir
	dir="$(pwd)/tools/fauxqs"

	if [ ! -f "$dir/package-lock.json" ]; then
		echo "sqs.sh: $dir/package-lock.json not found; source this script from the repository root" >&2
		return 1
	fi
	if millrace_sqs_answers "$endpoint"; then
		export MILLRACE_SQS_ENDPOINT="$endpoint"
		echo "sqs.sh: SQS endpoint already answers at $endpoint"
		return 0
	fi
	if ! command -v npm >/dev/null 2>&1; then
		echo "sqs.sh: npm not found; it is needed to install fauxqs from tools/fauxqs/package-lock.json" >&2
		return 1
	fi
	# npm ci only when the installed tree does not match the lock file (it deletes node_modules).
	if ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.package-lock.json.millrace" 2>/dev/null ||
		[ ! -x "$dir/node_modules/.bin/node" ]; then
		echo "sqs.sh: installing fauxqs from the lock file (npm ci in tools/fauxqs)"
		if ! (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error); then
			echo "sqs.sh: npm ci failed in $dir" >&2
			return 1
		fi
		cp "$dir/package-lock.json" "$dir/node_modules/.package-lock.json.millrace"
	fi
	if ! "$dir/node_modules/.bin/node" --version | grep -q '^v22\.'; then
		echo "sqs.sh: $dir/node_modules/.bin/node is not Node 22 ($("$dir/node_modules/.bin/node" --version 2>&1))" >&2
		return 1
	fi

	# setsid: the endpoint outlives the sourcing shell's job control and is not killed with it.
	# --wait keeps the launcher alive as long as node (setsid forks when it is a process group
	# leader, as under job control), so $! tells whether the endpoint still runs; serve.mjs
	# replaces the launcher's pid in the pid file with node's own once it listens.
	rm -f "$pidfile"
	FAUXQS_PIDFILE="$pidfile" setsid --wait "$dir/node_modules/.bin/node" "$dir/serve.mjs" "$port" \
		>"$logfile" 2>&1 </dev/null &
	local pid=$!

	local deadline=$((SECONDS + wait_s))
	until millrace_sqs_answers "$endpoint"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "sqs.sh: fauxqs (pid $pid) exited; log $logfile:" >&2
			tail -n 20 "$logfile" >&2
			rm -f "$pidfile"
			return 1
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "sqs.sh: fauxqs (pid $pid) did not answer at $endpoint within ${wait_s}s; stopping it; log $logfile" >&2
			millrace_sqs_stop_launched "$pid" "$pidfile"
			return 1
		fi
		sleep 0.5
	done
	[ -s "$pidfile" ] || echo "$pid" >"$pidfile"
	export MILLRACE_SQS_ENDPOINT="$endpoint"
	echo "sqs.sh: fauxqs (pid $(cat "$pidfile")) answers at $endpoint; stop it with: kill \"\$(cat $pidfile)\""
}

# millrace_sqs_stop_launched stops the endpoint this script launched as $1 (setsid, which may
# have forked node as its child) and removes the pid file $2 if it names that endpoint.
millrace_sqs_stop_launched() {
	local node_pid=""
	[ -s "$2" ] && node_pid="$(cat "$2")"
	pkill -TERM -P "$1" 2>/dev/null || true
	[ -n "$node_pid" ] && kill -TERM "$node_pid" 2>/dev/null
	kill -TERM "$1" 2>/dev/null || true
	rm -f "$2"
}

# millrace_sqs_answers reports whether an SQS endpoint answers ListQueues (JSON protocol) at $1.
millrace_sqs_answers() {
	curl -fsS --max-time 2 -X POST \
		-H 'Content-Type: application/x-amz-json-1.0' \
		-H 'X-Amz-Target: AmazonSQS.ListQueues' \
		-d '{}' "$1/" 2>/dev/null | grep -q 'QueueUrls'
}

millrace_sqs_start
