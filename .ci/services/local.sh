# Sourced by .ci/run: makes sure the services this machine kind starts before a session
# (Redis, RabbitMQ, PostgreSQL, NATS with JetStream) are up, starting any that stopped with the same commands the
# machine uses. Only loopback addresses are used.

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() { # name port seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    port_open "$2" && return 0
    sleep 0.1
  done
  echo "ci: $1 did not open 127.0.0.1:$2 within $3 s" >&2
  return 1
}

if ! port_open 6379; then
  echo "ci: starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_port Redis 6379 30 || return 1
fi
if ! port_open 5672; then
  echo "ci: starting RabbitMQ"
  rabbitmq-server -detached
  wait_port RabbitMQ 5672 120 || return 1
fi
if ! port_open 5432; then
  echo "ci: starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
  wait_port PostgreSQL 5432 60 || return 1
fi
if ! port_open 4222; then
  echo "ci: starting NATS (JetStream)"
  mkdir -p /var/lib/nats-server || return 1
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log || return 1
  wait_port NATS 4222 30 || return 1
fi
# RabbitMQ's management API lists queues (millrace dlq topics; adapters/amqp's URL tests). Its
# listener is loopback-only: at boot through advanced.config, and on the running node through the
# plugin's application environment, set before the plugin starts. Enabling persists (in
# enabled_plugins), so a RabbitMQ restarted later serves it again, on loopback.
if ! port_open 15672; then
  echo "ci: enabling RabbitMQ's management API on 127.0.0.1:15672"
  mgmt_listener='[{ip, "127.0.0.1"}, {port, 15672}]'
  mgmt_advanced="${RABBITMQ_ADVANCED_CONFIG_FILE:-/etc/rabbitmq/advanced.config}"
  if [ ! -e "$mgmt_advanced" ]; then
    echo "[{rabbitmq_management, [{tcp_config, $mgmt_listener}]}]." >"$mgmt_advanced" || return 1
  elif ! grep -q rabbitmq_management "$mgmt_advanced"; then
    echo "ci: $mgmt_advanced does not set rabbitmq_management's listener: not enabling the management API (it would listen on every interface)" >&2
    return 1
  fi
  rabbitmqctl -q eval "application:set_env(rabbitmq_management, tcp_config, $mgmt_listener, [{persistent, true}])." >/dev/null &&
    rabbitmq-plugins -q enable rabbitmq_management >/dev/null &&
    wait_port "RabbitMQ's management API" 15672 30 || return 1
fi
export MILLRACE_REDIS_URL="${MILLRACE_REDIS_URL:-redis://127.0.0.1:6379/0}"
export MILLRACE_AMQP_URL="${MILLRACE_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}"
export MILLRACE_POSTGRES_URL="${MILLRACE_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
