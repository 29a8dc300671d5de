package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress draws a one-line bar, redrawn in place with \r, on a terminal. It redraws when the
// completed fraction moves by a tenth of a percent, so a large replay costs at most 1000 redraws
// whatever its speed, and what it draws depends only on the counts (tests need no clock).
type progress struct {
	w        io.Writer // nil: disabled
	label    string
	total    int
	done     int
	drawn    int // permille last drawn, -1 before the first draw
	started  time.Time
	now      func() time.Time
	finished bool
}

const barWidth = 30

// newProgress returns a bar on w, or a disabled one when enabled is false.
func newProgress(w io.Writer, enabled bool, label string, total int, now func() time.Time) *progress {
	p := &progress{label: label, total: total, drawn: -1, now: now, started: now()}
	if enabled && total > 0 {
		p.w = w
		p.draw()
	}
	return p
}

// add counts n more items done.
func (p *progress) add(n int) {
	p.done += n
	if p.w == nil {
		return
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
	if el := p.now().Sub(p.started).Seconds(); el > 0 && p.done > 0 {
		rate = fmt.Sprintf("  %.0f/s", float64(p.done)/el)
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
