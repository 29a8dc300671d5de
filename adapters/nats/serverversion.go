package nats

import (
	"strconv"
	"strings"
)

// firstCountingServer is the first nats-server release known to count every delivery of a
// redelivered message (nats-server#5305, in 2.10.14). Before it, a redelivery that found only
// pull requests nobody listens to any more (those of a killed or disconnected consumer) was
// handed back by stepping the consumer's stream position back by one: the message at that
// position, already delivered and perhaps acknowledged, was then delivered again as new, with
// NumDelivered 1.
var firstCountingServer = [3]int{2, 10, 14}

// countsEveryDelivery reports whether a server of version v (ConnectedServerVersion, e.g.
// "2.9.10" or "2.11.0-beta.1") keeps NumDelivered rising for every delivery, the handing back
// above included. A version that does not parse is taken as one that does not: the adapter then
// warns, which costs nothing but a log line.
func countsEveryDelivery(v string) bool {
	v, _, _ = strings.Cut(v, "-")
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return false
		}
		if n != firstCountingServer[i] {
			return n > firstCountingServer[i]
		}
	}
	return true
}
