package agent

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/protocol"
	"github.com/forgeci/forgeci/shared/store"
)

// TestLogStepsAndTimes: through appends that fail or lose their answers,
// each step's section of the stored log starts at its "==> step" line and
// ends where the next starts, with its exit code, conclusion and masked
// name, recorded once; every stored chunk marks the first line that
// starts in it, so its lines' times are its own.
func TestLogStepsAndTimes(t *testing.T) {
	ctx := context.Background()
	var f *faulty
	st, c, claim := logSetup(t, func(h http.Handler) http.Handler { f = &faulty{next: h}; return f })
	secret := "hunter2-password"
	app := newLogAppender(c.Hold(claim.Lease), []string{secret})
	app.every = 2 * time.Millisecond
	// One millisecond for every line: only the first is marked where it
	// was written, and every later chunk must mark its own first line.
	stopped := time.Now()
	app.lines.now = func() time.Time { return stopped }
	go app.loop()
	_, _ = app.Write([]byte("setting up\n"))
	app.stepStarted(0, "build with "+secret)
	_, _ = app.Write([]byte("==> step 1/2: build\n"))
	for i := range 400 {
		_, _ = fmt.Fprintf(app, "compiling %03d %s\n", i, strings.Repeat("x", i%50))
		if i%40 == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	_, _ = app.Write([]byte("the last line, unended"))
	zero, one := 0, 1
	app.stepEnded(0, "", &zero, "success")
	app.stepStarted(1, "test")
	_, _ = app.Write([]byte("==> step 2/2: test\nFAIL\n"))
	app.stepEnded(1, "test ran\xff", &one, "failure")
	closeAppender(t, app)
	log := storedLog(t, st, claim)
	if !bytes.Contains(log, []byte("the last line, unended\n==> step 2/2")) {
		t.Fatal("a step's unended last line was not ended before the next step's section")
	}

	rows, err := st.Pool().Query(ctx, `SELECT idx, name, log_offset, end_offset, exit_code, conclusion, finished_at >= started_at
		FROM job_steps WHERE job_id = $1 ORDER BY idx`, claim.Lease.JobID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var idx, exit int
		var name, conclusion string
		var start, end int64
		var ordered bool
		if err := rows.Scan(&idx, &name, &start, &end, &exit, &conclusion, &ordered); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d %s [%d,%d) exit %d %s %v", idx, name, start, end, exit, conclusion, ordered))
	}
	second := int64(bytes.Index(log, []byte("==> step 2/2")))
	want := []string{
		fmt.Sprintf("0 build with *** [%d,%d) exit 0 success true", len("setting up\n"), second),
		fmt.Sprintf("1 test ran\uFFFD [%d,%d) exit 1 failure true", second, len(log)),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("steps\n%v\nwant\n%v", got, want)
	}
	checkChunkMarks(t, st, claim)
	if f.before.Load() == 0 || f.after.Load() == 0 {
		t.Fatalf("no faults were injected")
	}
}

// checkChunkMarks checks each stored chunk's marks lie on line starts,
// at times that do not go back, and that the first line starting in the
// chunk is marked.
func checkChunkMarks(t *testing.T, st *store.Store, claim *protocol.Claim) {
	t.Helper()
	rows, err := st.Pool().Query(context.Background(), `SELECT data, coalesce(times, '[]') FROM log_chunks
		WHERE job_id = $1 ORDER BY start_offset`, claim.Lease.JobID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	prevNL, last, chunks := true, int64(0), 0
	for rows.Next() {
		var data []byte
		var marks []protocol.LineTime
		if err := rows.Scan(&data, &marks); err != nil {
			t.Fatal(err)
		}
		chunks++
		first := -1
		if prevNL {
			first = 0
		} else if i := bytes.IndexByte(data, '\n'); i >= 0 && i+1 < len(data) {
			first = i + 1
		}
		if first >= 0 && (len(marks) == 0 || marks[0].Offset() != int64(first)) {
			t.Fatalf("chunk %d: its first line (at %d) is not marked: %v", chunks, first, marks)
		}
		for _, m := range marks {
			o := m.Offset()
			if !(o == 0 && prevNL || o > 0 && data[o-1] == '\n') || m[1] < last || m.Time().After(time.Now().Add(time.Minute)) {
				t.Fatalf("chunk %d: mark %v is not at a line start, or goes back in time", chunks, m)
			}
			last = m[1]
		}
		prevNL = data[len(data)-1] == '\n'
	}
	if chunks < 3 {
		t.Fatalf("%d chunks: too few to test", chunks)
	}
}
