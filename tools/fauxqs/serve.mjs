// serve.mjs starts fauxqs (a local SQS endpoint) for millrace's SQS adapter tests.
//
// fauxqs's own CLI listens on 0.0.0.0; this wrapper builds the same app through its exported
// buildApp() and listens on 127.0.0.1 only, so the test endpoint is never reachable from the
// network. Run it with the pinned Node 22 binary: node_modules/.bin/node serve.mjs [port].
// With FAUXQS_PIDFILE set, it writes its pid there once it listens.
// The port comes from the first argument, else FAUXQS_PORT, else 19324.
import { writeFileSync } from "node:fs";
import { buildApp } from "fauxqs";

const port = Number(process.argv[2] ?? process.env.FAUXQS_PORT ?? 19324);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  console.error(`fauxqs wrapper: invalid port ${process.argv[2] ?? process.env.FAUXQS_PORT}`);
  process.exit(2);
}
const host = "127.0.0.1";

// logger false: request logs would flood the log file. No host option: queue URLs then name the
// host the client connected to (127.0.0.1:<port>).
const app = buildApp({ logger: false });
try {
  const address = await app.listen({ port, host });
  // FAUXQS_PIDFILE: the CI script's pid file gets this process's own pid, whatever launched it.
  if (process.env.FAUXQS_PIDFILE) {
    writeFileSync(process.env.FAUXQS_PIDFILE, `${process.pid}\n`);
  }
  console.log(`fauxqs listening on ${address} (pid ${process.pid})`);
} catch (err) {
  console.error(`fauxqs wrapper: cannot listen on ${host}:${port}: ${err.message}`);
  process.exit(1);
}

for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    app.close().finally(() => process.exit(0));
  });
}
