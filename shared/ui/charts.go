package ui

import (
	"fmt"
	"html"
	"strings"

	"github.com/forgeci/forgeci/shared/store"
)

// Charts are drawn here as SVG, server-side: no script, no inline style
// (the policy allows neither), presentation attributes only; every number
// is formatted here and every text escaped.

const (
	chartW, chartH = 600, 140
	chartPad       = 30
)

// durationChart is a bar per run of a job, its height the job's
// duration, coloured by outcome, each bar titled and linked to its run.
// svg is markup a chart function built (numbers, and text it escaped):
// written as it is.
type svg string

func durationChart(runs []store.JobRun) svg {
	if len(runs) < 2 {
		return ""
	}
	longest := 1.0
	for _, r := range runs {
		longest = max(longest, r.Seconds)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" id="duration-chart" role="img" viewBox="0 0 %d %d" width="100%%" height="%d" xmlns="http://www.w3.org/2000/svg">`,
		chartW, chartH, chartH)
	fmt.Fprintf(&b, `<title>Duration of the last %d runs (longest %s)</title>`, len(runs), seconds(longest))
	slot := float64(chartW-chartPad) / float64(len(runs))
	for i, r := range runs {
		h := (float64(chartH-20) * r.Seconds / longest)
		colour := "#2e9e44"
		if r.State != "PASSED" {
			colour = "#cb2431"
		}
		fmt.Fprintf(&b, `<a href="/runs/%s/jobs/%s"><rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>#%d %s: %s</title></rect></a>`,
			html.EscapeString(r.RunID), html.EscapeString(r.JobID), float64(chartPad)+float64(i)*slot, float64(chartH-15)-h,
			max(slot-2, 1), max(h, 1), colour, r.RunNumber, html.EscapeString(r.State), seconds(r.Seconds))
	}
	fmt.Fprintf(&b, `<text x="0" y="12" font-size="10" fill="#666">%s</text><text x="0" y="%d" font-size="10" fill="#666">0</text></svg>`,
		seconds(longest), chartH-15)
	return svg(b.String()) // built above from numbers and escaped text
}

// passRateChart is a line per branch: its pass rate over a window of its
// last ended runs, run after run.
func passRateChart(branches []store.BranchOutcomes) svg {
	const window = 10
	colours := []string{"#1f6feb", "#8250df", "#bf3989", "#d4a72c", "#2e9e44"}
	var lines, legend strings.Builder
	drawn := 0
	for i, br := range branches {
		if len(br.Passed) < 2 {
			continue
		}
		colour := colours[i%len(colours)]
		var pts []string
		passed := 0
		for j, ok := range br.Passed {
			if ok {
				passed++
			}
			if j >= window && br.Passed[j-window] {
				passed--
			}
			rate := float64(passed) / float64(min(j+1, window))
			x := float64(chartPad) + float64(j)*float64(chartW-chartPad)/float64(len(br.Passed)-1)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, 10+float64(chartH-30)*(1-rate)))
		}
		fmt.Fprintf(&lines, `<polyline class="rate" fill="none" stroke="%s" stroke-width="2" points="%s"><title>%s</title></polyline>`,
			colour, strings.Join(pts, " "), html.EscapeString(br.Branch))
		fmt.Fprintf(&legend, `<text x="%d" y="%d" font-size="10" fill="%s">%s</text>`, chartPad+drawn*110, chartH-4, colour, html.EscapeString(br.Branch))
		drawn++
	}
	if drawn == 0 {
		return ""
	}
	return svg(fmt.Sprintf(`<svg class="chart" id="pass-rate-chart" role="img" viewBox="0 0 %d %d" width="100%%" height="%d" xmlns="http://www.w3.org/2000/svg">`+
		`<title>Pass rate per branch (over the last %d runs, run after run)</title>`+
		`<text x="0" y="14" font-size="10" fill="#666">100%%</text><text x="0" y="%d" font-size="10" fill="#666">0%%</text>%s%s</svg>`,
		chartW, chartH, chartH, window, chartH-20, lines.String(), legend.String()))
}

// seconds formats a duration in seconds as people read it.
func seconds(s float64) string {
	switch {
	case s < 60:
		return fmt.Sprintf("%.1fs", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", int(s)/60, int(s)%60)
	}
	return fmt.Sprintf("%dh%02dm", int(s)/3600, int(s)%3600/60)
}
