// Package scm is ForgeCI's GitHub integration: it processes recorded webhook
// deliveries into runs and mirrors jobs to GitHub Check runs.
package scm

import "context"

// Worker processes deliveries and reconciles check runs.
type Worker struct{}

// RunOnce does one pass of delivery processing and check reconciliation.
func (w *Worker) RunOnce(ctx context.Context) error { return nil }
