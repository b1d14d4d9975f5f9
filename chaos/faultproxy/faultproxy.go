// Package faultproxy is an HTTP proxy that breaks the conversation between
// runners and the control plane (or S3) on purpose: it can drop a request
// before forwarding it, forward it and then drop the answer (the server
// applied it; the client never hears), or hold it for a while first. It
// reads each request and each answer whole, so that it can report exactly
// what was asked, what was answered and whether the client got the answer.
//
// It forwards with the client's Host header, so presigned S3 URLs (signed
// for the proxy's address) stay valid through it.
package faultproxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// Fault is what the proxy does to one request.
type Fault string

const (
	None         Fault = ""
	DropRequest  Fault = "drop_request"  // close the client's connection; the server never sees it
	DropResponse Fault = "drop_response" // forward, let the server apply it, close instead of answering
	Delay        Fault = "delay"         // hold the request, then forward it
)

// Exchange is one request through the proxy as it ended.
type Exchange struct {
	Request   *http.Request // with Body already read into RequestBody
	Body      []byte
	Status    int // 0 when the server was not reached
	Response  []byte
	Fault     Fault
	Delayed   time.Duration
	Delivered bool // the client received the answer
	Received  time.Time
	Forwarded time.Time // when it was sent on to the server, after any delay (zero if not)
	Answered  time.Time // when the server's answer arrived (zero if none)
	Err       error     // forwarding failed
}

// Proxy forwards to one upstream.
type Proxy struct {
	// Decide picks the fault for a request (nil: none). It sees the body.
	Decide func(r *http.Request, body []byte) (Fault, time.Duration)
	// Done is told about every exchange, after the client got its answer
	// (or its broken connection).
	Done func(Exchange)

	target    *url.URL
	transport *http.Transport
	srv       *http.Server
	ln        net.Listener
	wg        sync.WaitGroup
}

// Start listens on a free loopback port and forwards to upstream.
func Start(upstream string) (*Proxy, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: u, ln: ln, transport: &http.Transport{
		MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second, ResponseHeaderTimeout: 2 * time.Minute}}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

// URL is the proxy's address.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Close stops the proxy.
func (p *Proxy) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
	_ = p.srv.Close()
	p.transport.CloseIdleConnections()
	p.wg.Wait()
}

// hopHeaders are not forwarded (RFC 9110 section 7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ex := Exchange{Request: r, Received: time.Now()}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		ex.Err = err
		p.done(ex)
		return
	}
	ex.Body = body
	if p.Decide != nil {
		ex.Fault, ex.Delayed = p.Decide(r, body)
	}
	if ex.Fault == DropRequest {
		drop(w)
		p.done(ex)
		return
	}
	if ex.Fault == Delay && ex.Delayed > 0 {
		time.Sleep(ex.Delayed)
	}
	out := r.Clone(context.WithoutCancel(r.Context()))
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = p.target.Scheme, p.target.Host
	out.Host = r.Host
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	if len(body) == 0 {
		// Else Go sends an empty body chunked, without Content-Length,
		// and S3 refuses an empty PUT so sent (411).
		out.Body = http.NoBody
	}
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	ex.Forwarded = time.Now()
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		ex.Err = err
		drop(w) // as the server's side would look to the client
		p.done(ex)
		return
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	ex.Answered = time.Now()
	if err != nil {
		ex.Err = err
		drop(w)
		p.done(ex)
		return
	}
	ex.Status, ex.Response = resp.StatusCode, respBody
	if ex.Fault == DropResponse {
		drop(w)
		p.done(ex)
		return
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	w.WriteHeader(resp.StatusCode)
	_, werr := w.Write(respBody)
	ex.Delivered = werr == nil
	p.done(ex)
}

func (p *Proxy) done(ex Exchange) {
	if p.Done != nil {
		p.Done(ex)
	}
}

// drop closes the client's connection without an answer.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("faultproxy: the response writer cannot be hijacked")
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // a reset, as a broken network gives
	}
	_ = conn.Close()
}
