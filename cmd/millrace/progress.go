package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress draws a one-line bar, redrawn in place with \r, on a terminal. It redraws when the
// completed fraction moves by a tenth of a percent, so a large replay costs at most 1000 redraws
// whatever its speed; the bar and counts depend only on the counts, the rate on the clock.
//
// The rate is measured from the first item done, not from the start: the first item costs no
// wait (a rate limiter's first token is free, and the selection was read before the bar
// started), so counting it over the milliseconds it took showed `394/s` on the first redraw of
// a replay at --rate 2. From the first item on, n more items in t seconds is n/t: the rate the
// limiter lets through.
type progress struct {
	w        io.Writer // nil: disabled
	label    string
	total    int
	done     int
	drawn    int       // permille last drawn, -1 before the first draw
	first    time.Time // when the first items were done; zero before
	atFirst  int       // how many were done then
	now      func() time.Time
	finished bool
}

const barWidth = 30

// newProgress returns a bar on w, or a disabled one when enabled is false.
func newProgress(w io.Writer, enabled bool, label string, total int, now func() time.Time) *progress {
	p := &progress{label: label, total: total, drawn: -1, now: now}
	if enabled && total > 0 {
		p.w = w
		p.draw()
	}
	return p
}

// add counts n more items done.
func (p *progress) add(n int) {
	if p.w == nil {
		p.done += n
		return
	}
	p.done += n
	if p.first.IsZero() && p.done > 0 {
		p.first, p.atFirst = p.now(), p.done
	}
	if permille(p.done, p.total) != p.drawn {
		p.draw()
	}
}

func (p *progress) draw() {
	pm := permille(p.done, p.total)
	p.drawn = pm
	filled := pm * barWidth / 1000
	rate := ""
	if p.done > p.atFirst {
		if el := p.now().Sub(p.first).Seconds(); el > 0 {
			rate = "  " + formatRate(float64(p.done-p.atFirst)/el)
		}
	}
	fmt.Fprintf(p.w, "\r%s [%s%s] %d/%d %3d%%%s", p.label, strings.Repeat("=", filled),
		strings.Repeat(" ", barWidth-filled), p.done, p.total, pm/10, rate)
}

// finish ends the bar's line, so what follows starts on a fresh one.
func (p *progress) finish() {
	if p.w == nil || p.finished {
		return
	}
	p.finished = true
	p.draw()
	fmt.Fprintln(p.w)
}

func permille(done, total int) int {
	if total <= 0 {
		return 1000
	}
	return min(done*1000/total, 1000)
}

// formatRate prints a rate with the digits that mean something: 0.5/s, 2.0/s, 812/s.
func formatRate(r float64) string {
	if r < 10 {
		return fmt.Sprintf("%.1f/s", r)
	}
	return fmt.Sprintf("%.0f/s", r)
}
