package isolate

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestMkdirAttemptRace: an attempt's directory is made while another slot
// ends a job of the same run, removing the run's directory whenever it is
// empty (cleanUp): every attempt's directory is made all the same.
func TestMkdirAttemptRace(t *testing.T) {
	work := t.TempDir()
	run := filepath.Join(work, "run")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the other slot, ending its jobs of the run
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				RemoveParents(filepath.Join(run, "other-job", "lease"))
			}
		}
	}()
	for i := range 500 {
		dir := filepath.Join(run, "job", "lease")
		if err := mkdirAttempt(dir); err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("attempt %d: %v", i, err)
		}
		_ = os.Remove(dir)
		_ = os.Remove(filepath.Dir(dir))
	}
	close(stop)
	wg.Wait()
}
