package main

import (
	"fmt"
	"html"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/ratekeeper/ratekeeper/bench/internal/measure"
)

// Colours by library: ratekeeper and its variants in blues and greens,
// the peers in warm colours and greys.
var libColors = map[string]string{
	"ratekeeper":           "#1f5fbf",
	"ratekeeper-nopipe":    "#7fa7e0",
	"ratekeeper+denycache": "#0b3473",
	"ratekeeper-rueidis":   "#2a9d8f",
	"ratekeeper-gcra":      "#8ecae6",
	"redis_rate":           "#e76f51",
	"ulule":                "#f4a261",
	"throttled":            "#e9c46a",
	"seed":                 "#8d8d8d",
}

// writeChart writes, for each mode, bars of the median decisions/s of
// each library at each concurrency, as a self-contained SVG file.
func writeChart(path string, cfg config, med map[cell]sample, redisVersion string) error {
	const (
		width    = 980
		left     = 80
		legendW  = 200
		plotW    = width - left - legendW - 20
		panelH   = 300
		titleH   = 56
		gapH     = 70
		barGap   = 2
		groupPad = 24
	)
	height := titleH + len(cfg.modes)*(panelH+gapH)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="16" font-weight="bold">Rate limiters for Go on Redis: decisions per second (median of %d rounds)</text>`+"\n", left, cfg.rounds)
	fmt.Fprintf(&b, `<text x="%d" y="44" fill="#555">%s per caller; call deadline %s; %d s per run; Redis %s on the same %s</text>`+"\n",
		left, cfg.policy, deadlineName(cfg.deadlines[0]), int(cfg.dur.Seconds()), html.EscapeString(redisVersion), cpuNote())

	for p, mode := range cfg.modes {
		top := titleH + p*(panelH+gapH) + 30
		var libMax []float64
		for _, l := range cfg.libs {
			top := 0.0
			for _, conc := range cfg.conc {
				top = max(top, med[cell{mode, conc, cfg.deadlines[0], l.name}].rate)
			}
			libMax = append(libMax, top)
		}
		axisMax, clip := chartScale(libMax)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", left, top-10, html.EscapeString(modeTitles[mode]))
		for i := 0; i <= 5; i++ {
			v := axisMax * float64(i) / 5
			y := float64(top+panelH) - float64(panelH)*float64(i)/5
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e3e3e3"/>`+"\n", left, left+plotW, y, y)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", left-6, y+4, shortCount(v))
		}
		groupW := float64(plotW) / float64(len(cfg.conc))
		barW := (groupW - groupPad) / float64(len(cfg.libs))
		for g, conc := range cfg.conc {
			x0 := float64(left) + float64(g)*groupW + groupPad/2
			for i, l := range cfg.libs {
				v := med[cell{mode, conc, cfg.deadlines[0], l.name}].rate
				h := float64(panelH) * math.Min(v, axisMax) / axisMax
				x := x0 + float64(i)*barW
				y := float64(top+panelH) - h
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, conc=%d: %s/s</title></rect>`+"\n",
					x, y, barW-barGap, h, libColors[l.name], html.EscapeString(l.name), conc, measure.Thousands(v))
				label := shortCount(v)
				if clip && v > axisMax {
					// A break across the bar says it goes on.
					fmt.Fprintf(&b, `<path d="M%.1f %.1f l%.1f -6 l%.1f 6" fill="none" stroke="#fff" stroke-width="2"/>`+"\n", x, y+10, (barW-barGap)/2, (barW-barGap)/2)
				}
				lx, ly := x+(barW-barGap)/2+3, y-4
				if clip && v > axisMax {
					ly = y + 24 // inside the clipped bar, in white
					fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="#fff" transform="rotate(-90 %.1f %.1f)" text-anchor="end">%s</text>`+"\n", lx, ly, lx, ly, label)
					continue
				}
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n", lx, ly, lx, ly, label)
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x0+(groupW-groupPad)/2, top+panelH+18, goroutines(conc))
		}
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#333"/>`+"\n", left, left+plotW, top+panelH, top+panelH)
	}
	lx := left + plotW + 24
	for i, l := range cfg.libs {
		y := titleH + 40 + i*22
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="14" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			lx, y, libColors[l.name], lx+20, y+12, html.EscapeString(l.name))
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// chartScale returns the top of the value axis from each library's
// largest value, and whether it clips some bars: a library more than three
// times faster than all others (the deny cache, in hot mode) would flatten
// them, so the axis is then set by the others.
func chartScale(libMax []float64) (float64, bool) {
	v := slices.Clone(libMax)
	slices.Sort(v)
	if len(v) == 0 || v[len(v)-1] <= 0 {
		return 1, false
	}
	top, clip := v[len(v)-1], false
	if len(v) > 1 && v[len(v)-2] > 0 && top > 3*v[len(v)-2] {
		top, clip = v[len(v)-2], true
	}
	return niceCeil(top * 1.15), clip
}

// niceCeil rounds x up to 1, 2, 2.5 or 5 times a power of ten, so that
// fifths of it are round numbers.
func niceCeil(x float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// shortCount formats a count as 950, 12k or 1.2M.
func shortCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func cpuNote() string {
	return fmt.Sprintf("%d CPUs as the client", runtime.NumCPU())
}

func goroutines(n int) string {
	if n == 1 {
		return "1 goroutine"
	}
	return fmt.Sprintf("%d goroutines", n)
}
