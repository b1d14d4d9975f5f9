package ui

import (
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/store"
)

// TestCharts: a bar per run, as tall as its share of the longest and
// coloured by outcome; a pass-rate line per branch over a window of runs;
// names escaped; nothing drawn from too little.
func TestCharts(t *testing.T) {
	runs := []store.JobRun{{RunNumber: 1, RunID: "r1", JobID: "j1", State: "PASSED", Seconds: 10, EndedAt: time.Now()},
		{RunNumber: 2, RunID: "r2", JobID: "j2", State: "FAILED", Seconds: 5, EndedAt: time.Now()}}
	svg := string(durationChart(runs))
	if strings.Count(svg, `<rect class="bar"`) != 2 || !strings.Contains(svg, `height="120.0" fill="#2e9e44"`) ||
		!strings.Contains(svg, `height="60.0" fill="#cb2431"`) || !strings.Contains(svg, "<title>#2 FAILED: 5.0s</title>") {
		t.Fatalf("duration chart:\n%s", svg)
	}
	if durationChart(runs[:1]) != "" {
		t.Fatal("a chart of one run")
	}
	rates := string(passRateChart([]store.BranchOutcomes{
		{Branch: "main", Passed: []bool{true, true, false, true}},
		{Branch: "<script>", Passed: []bool{false, false}},
		{Branch: "lonely", Passed: []bool{true}}}))
	if strings.Count(rates, "<polyline") != 2 || strings.Contains(rates, "<script>") || !strings.Contains(rates, "&lt;script&gt;") {
		t.Fatalf("pass-rate chart:\n%s", rates)
	}
	// main: 100%, 100%, 67%, 75% over a window of 10: the third point at
	// x = 30 + 2*570/3, y = 10 + 110*(1-2/3).
	if !strings.Contains(rates, "410.0,46.7") {
		t.Fatalf("main's third point:\n%s", rates)
	}
}
