// Package costs prices an idle ForgeCI and its work from cited list
// prices and measured counts, and writes infra/OPERATIONS.md's cost table
// (a test holds the document equal to Table). Prices are us-east-1
// on-demand list prices, per month of 730 hours, checked on the date in
// Checked; counts are measured by the tests and benchmarks named beside
// each.
package costs

import (
	"fmt"
	"strings"
)

// Checked is when the prices were read from the pages cited.
const Checked = "2026-12"

// A price as listed, with where it is listed.
type price struct {
	usd    float64
	per    string
	source string
}

// Prices, with their pages.
var (
	lambdaRequest  = price{0.20 / 1e6, "request", "https://aws.amazon.com/lambda/pricing/"}
	lambdaGBSecond = price{0.0000133334, "GB-second (arm64)", "https://aws.amazon.com/lambda/pricing/"}
	httpAPIRequest = price{1.00 / 1e6, "request", "https://aws.amazon.com/api-gateway/pricing/"}
	s3Write        = price{0.005 / 1000, "PUT, LIST or DELETE", "https://aws.amazon.com/s3/pricing/"}
	s3Read         = price{0.0004 / 1000, "GET", "https://aws.amazon.com/s3/pricing/"}
	kmsKey         = price{1.00, "key-month", "https://aws.amazon.com/kms/pricing/"}
	kmsRequest     = price{0.03 / 10000, "request", "https://aws.amazon.com/kms/pricing/"}
	secret         = price{0.40, "secret-month", "https://aws.amazon.com/secrets-manager/pricing/"}
	auroraACUHour  = price{0.12, "ACU-hour", "https://aws.amazon.com/rds/aurora/pricing/"}
	auroraGBMonth  = price{0.10, "GB-month", "https://aws.amazon.com/rds/aurora/pricing/"}
	auroraIO       = price{0.20 / 1e6, "I/O request", "https://aws.amazon.com/rds/aurora/pricing/"}
	logsGB         = price{0.50, "GB ingested", "https://aws.amazon.com/cloudwatch/pricing/"}
)

const hoursPerMonth = 730
const secondsPerMonth = hoursPerMonth * 3600

// Measured are the counts the table multiplies, each from a test or a
// benchmark of this repository (named beside it); those tests fail when
// the code no longer does what the count says.
var Measured = struct {
	// IdleDBSessions: database sessions an idle stack opens or holds
	// (forgeci-bench -only idle: 150 s with four idle slots;
	// runner/e2e TestIdleStack, which fails on more). Any at all keep
	// Aurora from pausing, and Idle prices it awake all month.
	IdleDBSessions int
	// IdlePollReads, IdlePollWrites: S3 requests of one idle poll at most
	// (shared/api TestIdlePollS3Requests).
	IdlePollReads  float64
	IdlePollWrites int
	// IdlePassLists, IdlePassReads: S3 requests of one scheduled
	// invocation with nothing due (shared/scheduled TestIdlePassS3Requests).
	IdlePassLists, IdlePassReads int
	// NotesPerJob: hint writes (each read back once) per job at most:
	// the queue hint and the due notes of the sweeper, scm and gc, one
	// of each per grain per container (shared/scheduled
	// TestHintWritesPerJob).
	NotesPerJob int
}{IdleDBSessions: 0, IdlePollReads: 1.33, IdlePollWrites: 0, IdlePassLists: 1, IdlePassReads: 0, NotesPerJob: 3}

// Assumed are what no test here can measure (AWS's own latencies), stated.
var Assumed = struct {
	IdlePollMillis, PassMillis float64 // billed Lambda duration (an S3 GET or LIST in the region)
	MemoryGB                   float64 // the functions' memory (template.yaml Globals: 256 MB)
	ClaimMemoryGB              float64 // the claim function's (128 MB)
	ResumeSeconds              float64 // Aurora Serverless v2 resuming from a pause (AWS: about 15 s, 30 s after a day)
	MinACU, PauseMinutes       float64 // Aurora's capacity while awake at the least, and its auto-pause delay (template.yaml)
	IdlePollSeconds            float64 // FORGECI_IDLE_POLL_SECONDS default
	StorageGB                  float64 // Aurora storage of a small installation
	SweepsPerMonth, GCPerMonth float64 // EventBridge rates: every minute, every ten
	IdleLogBytesPerInvocation  float64
	// Per job, as in the table before (runner and user calls, I/O, logs).
	CallsPerJob, CallMillis, IOPerJob, S3WritesPerJob, S3ReadsPerJob, LogMBPerJob float64
}{IdlePollMillis: 20, PassMillis: 30, MemoryGB: 0.25, ClaimMemoryGB: 0.125, ResumeSeconds: 15, MinACU: 0.5, PauseMinutes: 5,
	IdlePollSeconds: 20, StorageGB: 1,
	SweepsPerMonth: secondsPerMonth / 60, GCPerMonth: secondsPerMonth / 600, IdleLogBytesPerInvocation: 300,
	CallsPerJob: 100, CallMillis: 10, IOPerJob: 1000, S3WritesPerJob: 3, S3ReadsPerJob: 6, LogMBPerJob: 0.01}

// line is one row of a table.
type line struct {
	item string
	usd  float64
}

// Idle is the default shape's control plane with no job, per month.
func Idle() []line {
	a, m := Assumed, Measured
	invocations := a.SweepsPerMonth + a.GCPerMonth // scm is off without a GitHub App
	passes := invocations * (lambdaRequest.usd + a.PassMillis/1000*a.MemoryGB*lambdaGBSecond.usd)
	lists := invocations * (float64(m.IdlePassLists)*s3Write.usd + float64(m.IdlePassReads)*s3Read.usd)
	awake, state := 0.0, "paused"
	if m.IdleDBSessions > 0 { // a session every few minutes keeps the writer from pausing
		awake, state = hoursPerMonth, "never paused"
	}
	return []line{
		{"KMS key sealing project secrets (1 key, not rotated by default; requests only at cold starts that open secrets)", kmsKey.usd},
		{"Secrets Manager: the database master password (1 secret; the GitHub App's two only with an App)", secret.usd},
		{fmt.Sprintf("Aurora compute: %s, %d database sessions while idle (measured)", state, m.IdleDBSessions),
			awake * a.MinACU * auroraACUHour.usd},
		{fmt.Sprintf("Aurora storage (%.0f GB)", a.StorageGB), a.StorageGB * auroraGBMonth.usd},
		{fmt.Sprintf("sweeper every minute and gc every ten, %.0f invocations with nothing due", invocations), passes},
		{fmt.Sprintf("their S3 LISTs of due notes (%d each, measured)", m.IdlePassLists), lists},
		{"their logs (a line each)", invocations * a.IdleLogBytesPerInvocation / 1e9 * logsGB.usd},
	}
}

// IdleSlot is one idle runner slot, per month.
func IdleSlot() []line {
	a, m := Assumed, Measured
	polls := secondsPerMonth / a.IdlePollSeconds
	return []line{
		{fmt.Sprintf("HTTP API: %.0f idle polls (one every %.0f s)", polls, a.IdlePollSeconds), polls * httpAPIRequest.usd},
		{fmt.Sprintf("Lambda: %.0f requests of %.0f ms at %.0f MB", polls, a.IdlePollMillis, a.ClaimMemoryGB*1024),
			polls * (lambdaRequest.usd + a.IdlePollMillis/1000*a.ClaimMemoryGB*lambdaGBSecond.usd)},
		{fmt.Sprintf("S3: %.2f GETs and %d PUTs a poll (measured)", m.IdlePollReads, m.IdlePollWrites),
			polls * (m.IdlePollReads*s3Read.usd + float64(m.IdlePollWrites)*s3Write.usd)},
		{"database: none (measured)", 0},
	}
}

// PerThousandJobs is the control plane's cost of 1,000 jobs.
func PerThousandJobs() []line {
	a, m := Assumed, Measured
	calls := 1000 * a.CallsPerJob
	return []line{
		{fmt.Sprintf("Lambda: %.0f requests of %.0f ms at %.0f MB", calls, a.CallMillis, a.MemoryGB*1024),
			calls * (lambdaRequest.usd + a.CallMillis/1000*a.MemoryGB*lambdaGBSecond.usd)},
		{fmt.Sprintf("HTTP API: %.0f requests", calls), calls * httpAPIRequest.usd},
		{fmt.Sprintf("Aurora I/O (about %.0f a job)", a.IOPerJob), 1000 * a.IOPerJob * auroraIO.usd},
		{fmt.Sprintf("S3: %.0f PUTs and %.0f GETs a job for bytes", a.S3WritesPerJob, a.S3ReadsPerJob),
			1000 * (a.S3WritesPerJob*s3Write.usd + a.S3ReadsPerJob*s3Read.usd)},
		{fmt.Sprintf("S3: wake-up hints, at most %d written and read back a job (measured)", m.NotesPerJob),
			1000 * float64(m.NotesPerJob) * (s3Write.usd + s3Read.usd)},
		{fmt.Sprintf("CloudWatch Logs (%.0f MB: the functions' own lines; Lambda's START/END/REPORT are off)", 1000*a.LogMBPerJob),
			1000 * a.LogMBPerJob / 1000 * logsGB.usd},
	}
}

// Total sums a table.
func Total(ls []line) float64 {
	var t float64
	for _, l := range ls {
		t += l.usd
	}
	return t
}

// Table is the Markdown OPERATIONS.md holds between its costs markers.
func Table() string {

	var b strings.Builder
	section := func(title, totalName string, ls []line) {
		fmt.Fprintf(&b, "%s\n\n| item | per month |\n| --- | ---: |\n", title)
		for _, l := range ls {
			fmt.Fprintf(&b, "| %s | $%.3f |\n", l.item, l.usd)
		}
		fmt.Fprintf(&b, "| **%s** | **$%.2f** |\n\n", totalName, Total(ls))
	}
	section("Idle control plane, default shape (no job, no runner)", "idle control plane", Idle())
	section("Each idle runner slot", "per idle slot", IdleSlot())
	section("Per 1,000 jobs (control plane requests; the database's awake time is below)", "per 1,000 jobs", PerThousandJobs())
	a := Assumed
	fmt.Fprintf(&b, "A job queued after a long quiet is picked up within one idle poll (%.0f s) plus Aurora's resume "+
		"(about %.0f s, AWS's figure, not measured here; about 30 s after a day paused), since the first scan wakes the database.\n\n",
		a.IdlePollSeconds, a.ResumeSeconds)
	fmt.Fprintf(&b, "Each time the database wakes it bills at least %.1f ACU until %.0f minutes after its last session: $%.3f "+
		"for a wake of a moment, $%.2f for an hour awake. With `RotateSecretsKey=true` the key costs $%.0f more a month "+
		"from its first rotation (a year on) and $%.0f more from its second (each of the first two rotations is billed as a key).\n\n",
		a.MinACU, a.PauseMinutes, a.MinACU*a.PauseMinutes/60*auroraACUHour.usd, a.MinACU*auroraACUHour.usd, kmsKey.usd, 2*kmsKey.usd)
	fmt.Fprintf(&b, "Prices (us-east-1, checked %s): ", Checked)
	seen := map[string]bool{}
	var srcs []string
	for _, p := range []price{lambdaRequest, lambdaGBSecond, httpAPIRequest, s3Write, s3Read, kmsKey, kmsRequest, secret,
		auroraACUHour, auroraGBMonth, auroraIO, logsGB} {
		if !seen[p.source] {
			seen[p.source] = true
			srcs = append(srcs, p.source)
		}
	}
	b.WriteString(strings.Join(srcs, ", ") + ".\n")
	return b.String()
}
