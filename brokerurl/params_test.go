package brokerurl

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

func params(t *testing.T, raw string) *Params {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return NewParams(u)
}

// Each getter returns the value given, its default when the parameter is absent or empty, and
// Done is then nil.
func TestParamsGetters(t *testing.T) {
	p := params(t, "X://h?s=abc&b=true&i=42&d=90s&o=QUORUM&h&empty=&zero=0")
	if got := p.String("s", "def"); got != "abc" {
		t.Errorf("String = %q", got)
	}
	if got := p.Bool("b", false); !got {
		t.Error("Bool = false")
	}
	if got := p.Int("i", 0); got != 42 {
		t.Errorf("Int = %d", got)
	}
	if got := p.Duration("d", 0); got != 90*time.Second {
		t.Errorf("Duration = %v", got)
	}
	if got := p.OneOf("o", "classic", "classic", "quorum"); got != "quorum" {
		t.Errorf("OneOf = %q, want it lower-cased", got)
	}
	if !p.Has("h") || p.Has("absent") {
		t.Error("Has: want true for a present parameter without value, false for an absent one")
	}
	if got := p.Int("empty", 7); got != 7 {
		t.Errorf("Int(empty) = %d, want the default", got)
	}
	if got := p.Int("zero", 7); got != 0 {
		t.Errorf("Int(zero) = %d, want 0, not the default", got)
	}
	// Absent: defaults.
	if p.String("ns", "def") != "def" || !p.Bool("nb", true) || p.Int("ni", 5) != 5 ||
		p.Duration("nd", time.Minute) != time.Minute || p.OneOf("no", "classic", "classic") != "classic" {
		t.Error("absent parameters: want the defaults")
	}
	if err := p.Done(); err != nil {
		t.Errorf("Done = %v, want nil", err)
	}
}

// A bad value is a *ParameterError (ErrInvalidURL) naming the parameter, its value and the
// rule; Done reports the first one, before any unknown parameter.
func TestParamsBadValues(t *testing.T) {
	for _, tc := range []struct {
		query string
		read  func(*Params)
		want  string
	}{
		{"b=yes", func(p *Params) { p.Bool("b", false) }, `x:// parameter b="yes" must be true or false`},
		{"i=-1", func(p *Params) { p.Int("i", 0) }, `x:// parameter i="-1" must be a non-negative integer`},
		{"i=1.5", func(p *Params) { p.Int("i", 0) }, `x:// parameter i="1.5" must be a non-negative integer`},
		{"d=10", func(p *Params) { p.Duration("d", 0) }, `x:// parameter d="10" must be a non-negative duration such as 30s or 2m`},
		{"d=-1s", func(p *Params) { p.Duration("d", 0) }, `x:// parameter d="-1s" must be a non-negative duration such as 30s or 2m`},
		{"o=lazy", func(p *Params) { p.OneOf("o", "", "classic", "quorum") }, `x:// parameter o="lazy" must be one of classic, quorum`},
		{"s=a&s=b", func(p *Params) { p.String("s", "") }, `x:// parameter s="a,b" is given more than once`},
		{"i=1&i=2", func(p *Params) { p.Int("i", 0) }, `x:// parameter i="1,2" is given more than once`},
		{"i=x&d=y&zzz=1", func(p *Params) { p.Int("i", 0); p.Duration("d", 0) }, `x:// parameter i="x" must be a non-negative integer`},
	} {
		p := params(t, "X://h?"+tc.query)
		tc.read(p)
		err := p.Done()
		var pe *ParameterError
		if !errors.Is(err, ErrInvalidURL) || !errors.As(err, &pe) || err.Error() != tc.want {
			t.Errorf("%s: Done = %v, want ParameterError %q", tc.query, err, tc.want)
		}
	}
}

// Done names every parameter no one read, sorted, once each, with those the driver reads;
// parameters passed to the client library are listed as its own.
func TestParamsDoneUnknown(t *testing.T) {
	p := params(t, "x://h?zeta=1&alpha=2&group=g&heartbeat=5&alpha=3")
	p.String("group", "")
	p.Int("window", 0)
	passed := p.Pass("clientlib", "heartbeat", "channel_max")
	if passed.Encode() != "heartbeat=5" {
		t.Errorf("Pass = %q, want only the present heartbeat", passed.Encode())
	}
	err := p.Done()
	var ue *UnknownParameterError
	if !errors.Is(err, ErrUnknownParameter) || !errors.As(err, &ue) {
		t.Fatalf("Done = %v, want an UnknownParameterError", err)
	}
	if !slices.Equal(ue.Names, []string{"alpha", "zeta"}) || !slices.Equal(ue.Known, []string{"group", "window"}) ||
		ue.Client != "clientlib" || !slices.Equal(ue.ClientKnown, []string{"channel_max", "heartbeat"}) {
		t.Errorf("error %+v", ue)
	}
	want := "x:// does not take alpha, zeta (it takes group, window; and clientlib's channel_max, heartbeat)"
	if err.Error() != want {
		t.Errorf("message\n%s\nwant\n%s", err, want)
	}

	for _, tc := range []struct {
		raw  string
		read func(*Params)
		want string
	}{
		{"x://h?a=1", func(*Params) {}, "x:// does not take a (it takes no parameters)"},
		{"x://h?a=1", func(p *Params) { p.Has("b") }, "x:// does not take a (it takes b)"},
		{"x://h?a=1", func(p *Params) { p.Pass("lib", "b") }, "x:// does not take a (it takes lib's b)"},
		{"x://h?a%20b=1&c%3D=2", func(*Params) {}, `x:// does not take "a b", "c=" (it takes no parameters)`},
		// Likely typos get a suggestion, from the driver's names or the client's.
		{"x://h?windw=1", func(p *Params) { p.Int("window", 0); p.Int("group", 0) }, "x:// does not take windw; did you mean window? (it takes group, window)"},
		{"x://h?Gruop=1&foo=2", func(p *Params) { p.Int("window", 0); p.Int("group", 0) }, "x:// does not take Gruop, foo; did you mean group? (it takes group, window)"},
		{"x://h?dial_timout=1&windw=2", func(p *Params) { p.Int("window", 0); p.Pass("lib", "dial_timeout") }, "x:// does not take dial_timout, windw; did you mean dial_timeout or window? (it takes window; and lib's dial_timeout)"},
		{"x://h?c=1", func(p *Params) { p.Int("b", 0) }, "x:// does not take c (it takes b)"},
	} {
		p := params(t, tc.raw)
		tc.read(p)
		if err := p.Done(); err == nil || err.Error() != tc.want {
			t.Errorf("%s: Done = %v, want %q", tc.raw, err, tc.want)
		}
	}
}

// A repeated client parameter is refused too; one read by Pass is not unknown.
func TestParamsPass(t *testing.T) {
	p := params(t, "x://h?heartbeat=1&heartbeat=2")
	p.Pass("lib", "heartbeat")
	if err := p.Done(); !errors.Is(err, ErrInvalidURL) || !strings.Contains(err.Error(), "heartbeat") {
		t.Errorf("repeated client parameter: Done = %v, want ErrInvalidURL naming it", err)
	}
	p = params(t, "x://h?heartbeat=1")
	if got := p.Pass("lib", "heartbeat"); got.Get("heartbeat") != "1" {
		t.Errorf("Pass = %v", got)
	}
	if err := p.Done(); err != nil {
		t.Errorf("Done = %v", err)
	}
}
