package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Timing of the load generators.
const (
	// RequestTimeout bounds each HTTP request (connect, send, response and
	// body) beyond the sleep a /sleep request asks for, and each TCP echo
	// round trip. A request that exceeds it fails with class "timeout".
	RequestTimeout = 5 * time.Second
	// FailurePause is the least time a generator loop waits after a failed
	// request before the next one, so that a dead listener is not hammered.
	FailurePause = 10 * time.Millisecond
	// TCPInterval is the time between the echo round trips of TCPHold.
	TCPInterval = 50 * time.Millisecond
)

// Failure classes, the keys of Result.Errors. A non-2xx response is counted
// as "status_<N>xx" (for example "status_5xx", "status_4xx").
const (
	ClassReset     = "reset"      // ECONNRESET or EPIPE; HTTP/2 RST_STREAM
	ClassEOF       = "eof"        // the connection closed before a whole response; HTTP/2 GOAWAY with the stream open
	ClassRefused   = "refused"    // ECONNREFUSED
	ClassTimeout   = "timeout"    // RequestTimeout exceeded
	ClassStatus5xx = "status_5xx" // a 5xx response
	ClassMismatch  = "mismatch"   // TCP echo returned other bytes than sent
	ClassOther     = "other"      // any other error
)

// Result counts what a load generator did.
//
// Every request (HTTP) or echo round trip (TCP) that was started counts in
// Sent and in exactly one of OK, Failed and Canceled, so
// Sent == OK + Failed + Canceled once the generator has finished.
type Result struct {
	Sent int64
	// OK counts 2xx responses whose body was read in full (HTTP) and echoes
	// that returned the bytes sent (TCP).
	OK int64
	// Failed counts requests that got an error or a non-2xx status; Errors
	// breaks them down by class.
	Failed int64
	// Canceled counts requests that were in flight when the generator's
	// context was done: they are neither OK nor Failed.
	Canceled int64
	// Errors maps a failure class (Class* constants, "status_<N>xx") to its
	// count. It is never nil in a Result returned by Wait or Snapshot.
	Errors map[string]int64
	// ConnectionClose counts HTTP/1.1 responses with "Connection: close"
	// (the way Envoy tells HTTP/1.1 clients it is draining). Always 0 for
	// HTTP/2, which drains with GOAWAY instead.
	ConnectionClose int64
	// Conns counts the connections the generator opened: for HTTP the
	// requests that did not reuse a connection, for TCPHold 1.
	Conns int64
}

// String returns a one-line summary such as
// "sent=10 ok=9 failed=1 canceled=0 conn_close=0 conns=2 errors=map[eof:1]".
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sent=%d ok=%d failed=%d canceled=%d conn_close=%d conns=%d errors=map[",
		r.Sent, r.OK, r.Failed, r.Canceled, r.ConnectionClose, r.Conns)
	for i, k := range slices.Sorted(maps.Keys(r.Errors)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:%d", k, r.Errors[k])
	}
	b.WriteByte(']')
	return b.String()
}

// Load is a running load generator. Its goroutines end when their work is
// done, when the context given to the constructor is done, or on Stop.
type Load struct {
	cancel   context.CancelFunc
	done     chan struct{}
	draining atomic.Bool // set by Drain: send no new request

	mu    sync.Mutex
	res   Result
	lat   []time.Duration // of every OK HTTP request, for Latencies
	began []time.Time     // of every HTTP request sent, for Began
}

// startLoad starts workers goroutines running work and returns the Load and
// the context they run under.
func startLoad(ctx context.Context, workers int, work func(ctx context.Context, l *Load)) *Load {
	ctx, cancel := context.WithCancel(ctx)
	l := &Load{cancel: cancel, done: make(chan struct{}), res: Result{Errors: map[string]int64{}}}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { work(ctx, l) })
	}
	go func() {
		wg.Wait()
		cancel()
		close(l.done)
	}()
	return l
}

// Wait waits until the generator has finished (its work is done, or its
// context is done and the requests in flight have been aborted) and returns
// the final counts. It may be called any number of times.
func (l *Load) Wait() Result {
	<-l.done
	return l.Snapshot()
}

// Stop cancels the generator and waits until it has finished.
func (l *Load) Stop() {
	l.cancel()
	<-l.done
}

// Drain stops sending new requests, lets the ones in flight finish, and waits until the generator
// has finished: what a client that has moved to another endpoint does.
func (l *Load) Drain() {
	l.draining.Store(true)
	<-l.done
}

// sending reports whether a loop should send its next request.
func (l *Load) sending(ctx context.Context) bool { return ctx.Err() == nil && !l.draining.Load() }

// Latencies returns the duration of every OK HTTP request so far (sending to the end of the body), in the
// order they finished: what a report's percentiles are computed from.
func (l *Load) Latencies() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lat)
}

// Began returns when each HTTP request so far began (every one counted in Sent, whatever its end): what a test
// reads to show that requests were sent inside a window it knows only afterwards, such as a drain's phase.
func (l *Load) Began() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.began)
}

// Done returns a channel that is closed when the generator has finished.
func (l *Load) Done() <-chan struct{} { return l.done }

// Snapshot returns the counts so far, for progress reports while it runs.
func (l *Load) Snapshot() Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.res
	r.Errors = maps.Clone(l.res.Errors)
	return r
}

func (l *Load) update(f func(r *Result)) {
	l.mu.Lock()
	f(&l.res)
	l.mu.Unlock()
}

// finish records the end of one request started with Sent++: err == nil is
// OK; an error while ctx (the generator's context) is done is Canceled.
func (l *Load) finish(ctx context.Context, class string) {
	l.update(func(r *Result) {
		switch {
		case class == "":
			r.OK++
		case ctx.Err() != nil:
			r.Canceled++
		default:
			r.Failed++
			r.Errors[class]++
		}
	})
}

// pause waits d, or at least FailurePause after a failure; it reports false if
// ctx is done first.
func pause(ctx context.Context, d time.Duration, failed bool) bool {
	if failed {
		d = max(d, FailurePause)
	}
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// KeepAlive runs conns HTTP/1.1 keep-alive clients against addr
// ("host:port"), each a goroutine with its own Transport (MaxConnsPerHost 1)
// sending GET path (like "/" or "/sleep?d=200ms") repeatedly, interval apart (0: back to back),
// until ctx is done, Stop or Drain.
//
// After a response with "Connection: close" the client's next request opens
// a new connection, as a real client does. Go's Transport normally retries a
// GET silently when a reused connection turns out to be closed; KeepAlive
// prevents that (see noRetryBody), so each such race counts as a failure.
func KeepAlive(ctx context.Context, addr string, conns int, interval time.Duration, path string) *Load {
	return KeepAliveVia(ctx, nil, addr, conns, interval, path)
}

// KeepAliveVia is KeepAlive with the clients' connections opened by dial (nil: a plain net.Dialer), for
// instance from another network namespace.
func KeepAliveVia(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error),
	addr string, conns int, interval time.Duration, path string) *Load {
	u := "http://" + addr + path
	timeout := RequestTimeout + sleepOf(path)
	return startLoad(ctx, conns, func(ctx context.Context, l *Load) {
		t := newHTTP1Transport(1)
		if dial != nil {
			t.DialContext = dial
		}
		defer t.CloseIdleConnections()
		for l.sending(ctx) {
			ok := l.request(ctx, t, u, timeout, true)
			if !pause(ctx, interval, !ok) {
				return
			}
		}
	})
}

// ConnPerRequest runs clients HTTP/1.1 clients against addr, each sending GET path on a new connection
// (closed after the answer: no keep-alive) repeatedly, interval apart (0: back to back), until ctx is done,
// Stop or Drain: the traffic a load balancer passing TCP through (NLB, HAProxy in TCP mode) brings, each
// request a new connection to a backend. A new connection is never retried by Go's Transport, and KeepAlive's
// noRetryBody is set as well, so every failed connect or request is counted.
func ConnPerRequest(ctx context.Context, addr string, clients int, interval time.Duration, path string) *Load {
	u := "http://" + addr + path
	timeout := RequestTimeout + sleepOf(path)
	return startLoad(ctx, clients, func(ctx context.Context, l *Load) {
		t := newHTTP1Transport(1)
		t.DisableKeepAlives = true
		defer t.CloseIdleConnections()
		for l.sending(ctx) {
			ok := l.request(ctx, t, u, timeout, true)
			if !pause(ctx, interval, !ok) {
				return
			}
		}
	})
}

// HTTP2 opens one h2c (HTTP/2 with prior knowledge) client to addr and runs
// streams goroutines, each sending GET path (like "/" or "/sleep?d=1s")
// back to back on it until ctx is done or Stop. A new connection is opened
// only when the current one is no longer usable (after GOAWAY).
//
// Go's HTTP/2 transport retries a request the server has not processed
// (REFUSED_STREAM, or a stream above a GOAWAY's last stream ID), which the
// protocol allows every client; such retries are not failures.
func HTTP2(ctx context.Context, addr string, streams int, path string) *Load {
	u := "http://" + addr + path
	timeout := RequestTimeout + sleepOf(path)
	t := &http.Transport{
		Proxy:       nil,
		DialContext: (&net.Dialer{Timeout: RequestTimeout}).DialContext,
		HTTP2:       &http.HTTP2Config{StrictMaxConcurrentRequests: true},
	}
	t.Protocols = new(http.Protocols)
	t.Protocols.SetUnencryptedHTTP2(true)
	l := startLoad(ctx, streams, func(ctx context.Context, l *Load) {
		for l.sending(ctx) {
			ok := l.request(ctx, t, u, timeout, false)
			if !pause(ctx, 0, !ok) {
				return
			}
		}
	})
	go func() {
		<-l.done
		t.CloseIdleConnections()
	}()
	return l
}

// Long sends n concurrent GET /sleep?d=<d> to addr over HTTP/1.1, one request
// per connection, and finishes when all have answered (each bounded by
// d + RequestTimeout), or when ctx is done or Stop. Like KeepAlive it prevents
// Go's silent retries.
func Long(ctx context.Context, addr string, n int, d time.Duration) *Load {
	u := "http://" + addr + "/sleep?d=" + url.QueryEscape(d.String())
	return startLoad(ctx, n, func(ctx context.Context, l *Load) {
		t := newHTTP1Transport(1)
		defer t.CloseIdleConnections()
		l.request(ctx, t, u, d+RequestTimeout, true)
	})
}

// sleepOf returns the d parameter of a /sleep path, or 0.
func sleepOf(path string) time.Duration {
	u, err := url.Parse(path)
	if err != nil || u.Path != "/sleep" {
		return 0
	}
	d, _ := time.ParseDuration(u.Query().Get("d"))
	return max(d, 0)
}

func newHTTP1Transport(maxConns int) *http.Transport {
	t := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: RequestTimeout}).DialContext,
		MaxConnsPerHost:     maxConns,
		MaxIdleConnsPerHost: maxConns,
		DisableCompression:  true,
	}
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP1(true)
	return t
}

// noRetryBody is an empty request body of unknown length. Go's Transport
// sends a GET with such a body as a plain GET without a body (it probes the
// body and finds it empty), but, the body not being replayable (no
// GetBody), it never retries the request on another connection. That keeps
// the count honest: a request that hits a connection the server has just
// closed fails visibly instead of being retried.
type noRetryBody struct{}

func (noRetryBody) Read([]byte) (int, error) { return 0, io.EOF }
func (noRetryBody) Close() error             { return nil }

// request sends one GET u over rt, bounded by timeout and ctx, records the
// outcome in l and reports whether it was OK.
func (l *Load) request(ctx context.Context, rt http.RoundTripper, u string, timeout time.Duration, noRetry bool) bool {
	if ctx.Err() != nil {
		return false
	}
	began := time.Now()
	l.mu.Lock()
	l.res.Sent++
	l.began = append(l.began, began)
	l.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rctx = httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if !info.Reused {
				l.update(func(r *Result) { r.Conns++ })
			}
		},
	})
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
	if err != nil {
		l.finish(ctx, ClassOther)
		return false
	}
	if noRetry {
		req.Body = noRetryBody{}
	}
	class := ""
	resp, err := rt.RoundTrip(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Close {
			l.update(func(r *Result) { r.ConnectionClose++ })
		}
		if err == nil && (resp.StatusCode < 200 || resp.StatusCode > 299) {
			class = fmt.Sprintf("status_%dxx", resp.StatusCode/100)
		}
	}
	if err != nil {
		class = classify(err)
	}
	if class == "" {
		took := time.Since(began)
		l.mu.Lock()
		l.lat = append(l.lat, took)
		l.mu.Unlock()
	}
	l.finish(ctx, class)
	return class == ""
}

// classify maps a client error to a failure class.
func classify(err error) string {
	var ne net.Error
	msg := err.Error()
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return ClassTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return ClassRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		strings.Contains(msg, "connection reset"), strings.Contains(msg, "broken pipe"),
		strings.Contains(msg, "stream error"), strings.Contains(msg, "RST_STREAM"):
		return ClassReset
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		strings.Contains(msg, "EOF"), strings.Contains(msg, "server closed idle connection"),
		strings.Contains(msg, "GOAWAY"), strings.Contains(msg, "connection lost"):
		return ClassEOF
	}
	return ClassOther
}

// TCPHold opens one TCP connection to addr (the TCP proxy listener), and
// every TCPInterval writes a short message and checks that the same bytes
// come back, until hold has passed, when it closes the connection itself and
// finishes. Each round trip counts as one request; the first failed round
// (error, or "mismatch") ends the connection and the generator. ctx or Stop
// end it early; the round in flight then counts as Canceled.
func TCPHold(ctx context.Context, addr string, hold time.Duration) *Load {
	return TCPHoldFrom(ctx, "", addr, hold)
}

// TCPHoldFrom is [TCPHold] from the local IP address from (such as [MixedTCPSource]); "" lets the kernel choose.
func TCPHoldFrom(ctx context.Context, from, addr string, hold time.Duration) *Load {
	d := &net.Dialer{Timeout: RequestTimeout}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	return startLoad(ctx, 1, func(ctx context.Context, l *Load) {
		ctx, cancel := context.WithTimeout(ctx, hold)
		defer cancel()
		l.update(func(r *Result) { r.Sent++ })
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			l.finish(ctx, classify(err))
			return
		}
		defer c.Close()
		l.update(func(r *Result) { r.Conns++ })
		// Unblock a read or write in flight when ctx is done.
		defer context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })()
		buf := make([]byte, 64)
		for seq := 0; ; seq++ {
			if seq > 0 {
				l.update(func(r *Result) { r.Sent++ })
			}
			msg := fmt.Appendf(nil, "testbed echo %d\n", seq)
			class := echo(c, msg, buf)
			if ctx.Err() != nil && class != "" {
				// The hold (or the caller's ctx) ended the round, not a failure.
				l.update(func(r *Result) { r.Canceled++ })
				return
			}
			l.finish(ctx, class)
			if class != "" || !pause(ctx, TCPInterval, false) {
				return
			}
		}
	})
}

// echo writes msg to c and reads it back into buf, bounded by RequestTimeout,
// and returns the failure class or "".
func echo(c net.Conn, msg, buf []byte) string {
	c.SetDeadline(time.Now().Add(RequestTimeout))
	if _, err := c.Write(msg); err != nil {
		return classify(err)
	}
	got := buf[:len(msg)]
	if _, err := io.ReadFull(c, got); err != nil {
		return classify(err)
	}
	if string(got) != string(msg) {
		return ClassMismatch
	}
	return ""
}
