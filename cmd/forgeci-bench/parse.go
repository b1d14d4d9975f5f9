package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/forgeci/forgeci/shared/pipeline"
	"github.com/forgeci/forgeci/shared/pipeline/pipelinetest"
)

// parseMemoryBudget is the memory, in MB of 2^20 bytes allocated, that the
// bounded pipeline parser keeps any file under.
const parseMemoryBudget = 64

// noDatabase names the benchmarks that run without PostgreSQL.
var noDatabase = map[string]bool{"pipeline-parse": true}

// benchParse: the bounded pipeline parser on its adversarial corpus at the
// file size limit (pipelinetest.Adversarial: nested brackets and blocks,
// long keys, quadratic text, and files just inside each of its budgets).
// The slowest input's parse time stands beside parsing a realistic
// pipeline of the same size (within 10 times: ratio ≥ 0.1), and the
// largest allocation beside the 64 MB budget (ratio ≥ 1). Times are
// medians over rounds; realistic and adversarial parses take turns.
func benchParse(_ context.Context, _ string, rounds int) ([]row, error) {
	size := pipeline.MaxFileBytes
	realistic := pipelinetest.Realistic(size)
	if _, err := pipeline.Parse(pipeline.FileName, realistic); err != nil {
		return nil, fmt.Errorf("the realistic pipeline does not parse: %v", err)
	}
	corpus := pipelinetest.Adversarial(size)
	var base []float64
	times := make([][]float64, len(corpus))
	peak, peakName := 0.0, ""
	for range max(1, rounds) {
		for i, c := range corpus {
			ms, _ := parseOnce(realistic)
			base = append(base, ms)
			ms, mb := parseOnce(c.Src)
			times[i] = append(times[i], ms)
			if mb > peak {
				peak, peakName = mb, c.Name
			}
		}
	}
	worst, worstName := 0.0, ""
	for i, ts := range times {
		if m := median(ts); m > worst {
			worst, worstName = m, corpus[i].Name
		}
	}
	fmt.Fprintf(os.Stderr, "  slowest: %s; most memory: %s\n", worstName, peakName)
	return []row{
		{name: "pipeline parse, adversarial worst case", figure: worst, baseline: median(base), unit: "ms",
			baselineName: "a realistic pipeline, same size", goal: 0.1},
		{name: "pipeline parse peak memory", figure: peak, baseline: parseMemoryBudget, unit: "MB",
			baselineName: "the 64 MB budget", goal: 1},
	}, nil
}

// parseOnce parses src: milliseconds taken and MB allocated.
func parseOnce(src []byte) (float64, float64) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, _ = pipeline.Parse(pipeline.FileName, src) // most of the corpus is refused
	d := time.Since(start)
	runtime.ReadMemStats(&after)
	return d.Seconds() * 1000, float64(after.TotalAlloc-before.TotalAlloc) / (1 << 20)
}
