package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/forgeci/forgeci/shared/domain"
)

// Op is one line of the operation log: a runner request as the fault proxy
// saw it, a fault the harness injected, a sweep, or a submitted run. Times
// are Unix nanoseconds on the harness's clock.
type Op struct {
	Seq  int64  `json:"seq"`
	T    int64  `json:"t"`
	Kind string `json:"kind"` // request, fault, sweep, submit

	// request: one HTTP exchange between a runner and the control plane
	// (Route is the route name) or S3 (Route "s3 GET" or "s3 PUT").
	Runner  string        `json:"runner,omitempty"`
	Route   string        `json:"route,omitempty"`
	Job     string        `json:"job,omitempty"`
	Lease   *domain.Lease `json:"lease,omitempty"`
	Offset  *int64        `json:"offset,omitempty"`
	Len     int           `json:"len,omitempty"`
	SHA     string        `json:"sha,omitempty"` // of the log bytes
	Name    string        `json:"name,omitempty"`
	Digest  string        `json:"digest,omitempty"`
	Key     string        `json:"key,omitempty"`
	Outcome string        `json:"outcome,omitempty"`
	Status  int           `json:"status,omitempty"`
	Code    string        `json:"code,omitempty"`
	Fault   string        `json:"fault,omitempty"`
	// Replay: the harness sent this request again after every job ended
	// (replayStale), not the runner.
	Replay    bool   `json:"replay,omitempty"`
	DelayMS   int64  `json:"delay_ms,omitempty"`
	Delivered bool   `json:"delivered,omitempty"`
	Received  int64  `json:"received,omitempty"`
	Answered  int64  `json:"answered,omitempty"`
	Err       string `json:"err,omitempty"`
	// Claimed is the lease a claim answer granted.
	Claimed *domain.Lease `json:"claimed,omitempty"`

	// fault: Fault is its kind; Target what it hit; End when it stopped
	// acting (a SIGSTOP's SIGCONT, a restart's readiness).
	Target string `json:"target,omitempty"`
	End    int64  `json:"end,omitempty"`
	Detail string `json:"detail,omitempty"`

	// sweep: Start..End, OK when it ran to the end.
	Start    int64 `json:"start,omitempty"`
	OK       bool  `json:"ok,omitempty"`
	Aborted  int   `json:"aborted,omitempty"`
	Requeued int   `json:"requeued,omitempty"`

	// submit
	Run     string `json:"run,omitempty"`
	Variant string `json:"variant,omitempty"`
}

// opLog appends Ops to a JSON-lines file.
type opLog struct {
	mu  sync.Mutex
	f   *os.File
	w   *bufio.Writer
	enc *json.Encoder
	seq int64
	// closed: late reports (a request still in flight at the end) are
	// dropped.
	closed bool
}

func createOpLog(path string) (*opLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriterSize(f, 1<<16)
	return &opLog{f: f, w: w, enc: json.NewEncoder(w)}, nil
}

func (l *opLog) add(op Op) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.seq++
	op.Seq = l.seq
	if op.T == 0 {
		op.T = time.Now().UnixNano()
	}
	_ = l.enc.Encode(op)
}

func (l *opLog) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if err := l.w.Flush(); err != nil {
		return err
	}
	return l.f.Close()
}

// ReadOps reads an operation log.
func ReadOps(path string) ([]Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ops []Op
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for n := 1; sc.Scan(); n++ {
		var op Op
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		ops = append(ops, op)
	}
	return ops, sc.Err()
}
