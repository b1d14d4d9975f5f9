package faultproxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestFaults(t *testing.T) {
	var hits atomic.Int64
	var host atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		host.Store(r.Host)
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Echo", "yes")
		_, _ = w.Write(append([]byte("got "), b...))
	}))
	defer up.Close()
	p, err := Start(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	exchanges := make(chan Exchange, 10)
	p.Decide = func(r *http.Request, _ []byte) (Fault, time.Duration) {
		return Fault(r.Header.Get("X-Fault")), 200 * time.Millisecond
	}
	p.Done = func(ex Exchange) { exchanges <- ex }
	send := func(fault Fault) (string, error) {
		req, _ := http.NewRequest("POST", p.URL()+"/x", strings.NewReader("body"))
		req.Header.Set("X-Fault", string(fault))
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b) + " " + resp.Header.Get("X-Echo"), nil
	}

	if got, err := send(None); err != nil || got != "got body yes" {
		t.Fatalf("plain request: %q %v", got, err)
	}
	if ex := <-exchanges; !ex.Delivered || ex.Status != 200 || string(ex.Body) != "body" || host.Load() != strings.TrimPrefix(p.URL(), "http://") {
		t.Fatalf("plain exchange %+v (upstream saw host %v)", ex, host.Load())
	}
	if _, err := send(DropRequest); err == nil {
		t.Fatal("a dropped request got an answer")
	}
	if ex := <-exchanges; ex.Status != 0 || hits.Load() != 1 {
		t.Fatalf("dropped request reached the server: %+v, %d hits", ex, hits.Load())
	}
	if _, err := send(DropResponse); err == nil {
		t.Fatal("a dropped answer arrived")
	}
	if ex := <-exchanges; ex.Status != 200 || ex.Delivered || hits.Load() != 2 {
		t.Fatalf("drop_response: %+v, %d hits", ex, hits.Load())
	}
	start := time.Now()
	if got, err := send(Delay); err != nil || got != "got body yes" || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("delayed request: %q %v after %s", got, err, time.Since(start))
	}
	<-exchanges
}

// TestEmptyBody: an empty PUT reaches the server with Content-Length 0,
// not chunked (S3 refuses that with 411).
func TestEmptyBody(t *testing.T) {
	seen := make(chan *http.Request, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r }))
	defer up.Close()
	p, err := Start(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	req, _ := http.NewRequest("PUT", p.URL()+"/note", http.NoBody)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	r := <-seen
	if r.ContentLength != 0 || len(r.TransferEncoding) != 0 {
		t.Fatalf("upstream saw Content-Length %d, Transfer-Encoding %v", r.ContentLength, r.TransferEncoding)
	}
}
