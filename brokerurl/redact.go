package brokerurl

import (
	"errors"
	"net/url"
	"strings"
)

// masked replaces every secret Redact hides.
const masked = "xxxxx"

// Redact hides a URL's secrets, for messages and logs: the password of its userinfo (as
// url.URL.Redacted does), the value of every query parameter whose name says it is a secret
// (password, passwd, secret, token: pgx's ?password=), and the password of a URL given as a
// parameter value (amqp's ?management=http://user:password@host). A URL that does not parse
// (an unencoded "/", "#" or "?" in its password) keeps its scheme and host and loses everything
// between "://" and the "@" before the host; one whose host cannot be found is not shown at all.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return redactUnparsable(raw)
	}
	if u.RawQuery != "" {
		u.RawQuery = redactQuery(u.RawQuery)
	}
	return u.Redacted()
}

// redactQuery hides the secrets of a raw query, keeping its order and its encoding otherwise.
func redactQuery(raw string) string {
	pairs := strings.Split(raw, "&")
	for i, pair := range pairs {
		rk, rv, _ := strings.Cut(pair, "=")
		k, err1 := url.QueryUnescape(rk)
		v, err2 := url.QueryUnescape(rv)
		if err1 != nil || err2 != nil {
			pairs[i] = rk + "=" + masked // cannot tell what it holds
			continue
		}
		if r := redactValue(k, v); r != v {
			pairs[i] = rk + "=" + r
		}
	}
	return strings.Join(pairs, "&")
}

// redactValue hides the query value v of parameter k when k names a secret or v is a URL with
// a password.
func redactValue(k, v string) string {
	lk := strings.ToLower(k)
	for _, w := range []string{"password", "passwd", "secret", "token"} {
		if strings.Contains(lk, w) {
			return masked
		}
	}
	if strings.Contains(v, "://") && strings.Contains(v, "@") {
		return Redact(v)
	}
	return v
}

// redactUnparsable hides the userinfo of a URL url.Parse refuses. The userinfo ends at the last
// "@" that is followed by a host (letters, digits, ".-_:[],") and then the end or one of "/?#":
// a password may hold any of "/?#@" unencoded, a host none of them.
func redactUnparsable(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		if strings.Contains(raw, "@") {
			return "(URL not shown: it does not parse)"
		}
		return raw
	}
	at := -1
	for i := strings.LastIndex(rest, "@"); i >= 0; i = strings.LastIndex(rest[:i], "@") {
		if hostThenEnd(rest[i+1:]) {
			at = i
			break
		}
	}
	if at < 0 {
		if strings.Contains(rest, "@") {
			return scheme + "://(rest not shown: it does not parse)"
		}
		return raw
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	if !hasPassword {
		return raw
	}
	if strings.ContainsAny(user, "/?#") { // the cut fell inside a password: show no user name
		user = ""
	}
	return scheme + "://" + user + ":" + masked + rest[at:]
}

// hostThenEnd reports whether s starts with a non-empty host[:port][,host:port] and then ends
// or goes on with "/", "?" or "#".
func hostThenEnd(s string) bool {
	n := 0
	for n < len(s) && strings.IndexByte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:[],%", s[n]) >= 0 {
		n++
	}
	return n > 0 && (n == len(s) || strings.IndexByte("/?#", s[n]) >= 0)
}

// parseProblem says why rawURL does not parse without quoting it: url.Parse's errors quote the
// URL or the piece that failed, which may be part of a password.
func parseProblem(rawURL string, err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if !strings.Contains(rawURL, "@") {
		return err.Error()
	}
	return "it does not parse as a URL; percent-encode the reserved characters (/ ? # @ : %) in its user name and password"
}
