package testbed

// Tests of the upstream and the load generators that need no Envoy.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestUpstream(t *testing.T) {
	up := StartUpstreamTB(t)
	h2 := &http.Transport{Protocols: new(http.Protocols)}
	h2.Protocols.SetUnencryptedHTTP2(true)
	defer h2.CloseIdleConnections()
	for _, tc := range []struct {
		rt        http.RoundTripper
		path      string
		status    int
		body      string
		protoMajo int
	}{
		{http.DefaultTransport, "/", 200, "ok", 1},
		{h2, "/", 200, "ok", 2},
		{http.DefaultTransport, "/sleep?d=10ms", 200, "slept", 1},
		{h2, "/sleep?d=10ms", 200, "slept", 2},
		{http.DefaultTransport, "/sleep?d=x", 400, "", 1},
		{http.DefaultTransport, "/nope", 404, "", 1},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+up.HTTPAddr+tc.path, nil)
		resp, err := tc.rt.RoundTrip(req)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || (tc.body != "" && string(body) != tc.body) || resp.ProtoMajor != tc.protoMajo {
			t.Errorf("GET %s: %s HTTP/%d %q, want %d HTTP/%d %q", tc.path, resp.Status, resp.ProtoMajor, body, tc.status, tc.protoMajo, tc.body)
		}
	}

	c, err := net.DialTimeout("tcp", up.TCPAddr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if class := echo(c, []byte("hello\n"), make([]byte, 16)); class != "" {
		t.Errorf("echo: %s", class)
	}
}

// TestGeneratorsDirect runs the generators against the upstream itself.
func TestGeneratorsDirect(t *testing.T) {
	up := StartUpstreamTB(t)
	// Windows of a second or more: a generator must get at least one answer in it on a busy machine.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	loads := map[string]*Load{
		"keepalive": KeepAlive(ctx, up.HTTPAddr, 2, 0, "/"),
		"http2":     HTTP2(ctx, up.HTTPAddr, 2, "/sleep?d=1ms"),
		"long":      Long(ctx, up.HTTPAddr, 2, 50*time.Millisecond),
		"tcp":       TCPHold(ctx, up.TCPAddr, time.Second),
		"conn":      ConnPerRequest(ctx, up.HTTPAddr, 2, 0, "/"),
	}
	for name, l := range loads {
		r := l.Wait()
		if r.Failed != 0 || r.OK == 0 || r.Sent != r.OK+r.Failed+r.Canceled {
			t.Errorf("%s: %v", name, r)
		}
		if name != "tcp" && int64(len(l.Began())) != r.Sent {
			t.Errorf("%s: %d start times for %d requests sent", name, len(l.Began()), r.Sent)
		}
		// ConnPerRequest: every request on a connection of its own.
		if name == "conn" && r.Conns < r.OK {
			t.Errorf("conn: %d connections for %d requests answered, want one each: %v", r.Conns, r.OK, r)
		}
	}
	// A generator whose context is cancelled counts its requests in flight as
	// Canceled, not Failed.
	long := Long(t.Context(), up.HTTPAddr, 2, time.Minute)
	long.Stop()
	if r := long.Wait(); r.Sent != r.Canceled || r.Failed != 0 {
		t.Errorf("stopped long: %v, want all canceled", r)
	}
}

// TestGeneratorsFailures checks that failures are counted and classified.
func TestGeneratorsFailures(t *testing.T) {
	// A port nobody listens on: connections are refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	for name, l := range map[string]*Load{
		"keepalive": KeepAlive(ctx, addr, 1, 0, "/"),
		"http2":     HTTP2(ctx, addr, 1, "/"),
		"tcp":       TCPHold(ctx, addr, time.Second),
	} {
		r := l.Wait()
		if r.Failed == 0 || r.Errors[ClassRefused] != r.Failed || r.OK != 0 {
			t.Errorf("%s against a closed port: %v, want only refused", name, r)
		}
	}

	up := StartUpstreamTB(t)
	ctx, cancel = context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	r := KeepAlive(ctx, "127.0.0.1:99999", 1, 0, "/").Wait() // not a valid port
	if r.Errors[ClassOther] == 0 {
		t.Errorf("keepalive to a bad address: %v, want other", r)
	}
	r = Long(t.Context(), up.HTTPAddr, 1, MaxSleep+time.Second).Wait() // 400
	if r.Failed != 1 || r.Errors["status_4xx"] != 1 {
		t.Errorf("long beyond MaxSleep: %v, want status_4xx", r)
	}
}

// TestKeepAliveNoSilentRetry checks that a request on a reused connection
// the server closes is counted as a failure, whereas Go retries it silently
// by default.
func TestKeepAliveNoSilentRetry(t *testing.T) {
	for _, noRetry := range []bool{true, false} {
		t.Run(fmt.Sprintf("noRetry=%t", noRetry), func(t *testing.T) {
			addr := closeSecondRequestServer(t)
			rt := newHTTP1Transport(1)
			defer rt.CloseIdleConnections()
			l := startLoad(t.Context(), 1, func(ctx context.Context, l *Load) {
				for range 2 {
					l.request(ctx, rt, "http://"+addr+"/", RequestTimeout, noRetry)
				}
			})
			r := l.Wait()
			want := Result{Sent: 2, OK: 2, Conns: 2, Errors: map[string]int64{}} // retried on a second connection
			if noRetry {
				want = Result{Sent: 2, OK: 1, Failed: 1, Conns: 1, Errors: map[string]int64{ClassEOF: 1}}
			}
			if r.String() != want.String() {
				t.Errorf("got %v, want %v", r, want)
			}
		})
	}
}

// closeSecondRequestServer serves HTTP/1.1 keep-alive on 127.0.0.1; on the
// first connection it answers the first request and closes the connection on
// reading the second, as a server does that closes an idle connection while
// the client sends on it.
func closeSecondRequestServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 0; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					req.Body.Close()
					if i == 0 && n == 1 {
						return
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestIdlePoolEnds checks that the pool tells a FIN from a RST from an open
// connection.
func TestIdlePoolEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The server answers one request per connection, then, on the signal,
	// closes the 2nd connection, resets the 3rd and keeps the 1st open.
	end := make(chan struct{})
	served := make(chan struct{}, 3)
	go func() {
		for i := range 3 {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				served <- struct{}{}
				<-end
				switch i {
				case 0:
					io.Copy(io.Discard, c) // until the pool closes it
				case 2:
					c.(*net.TCPConn).SetLinger(0) // Close sends RST
				}
			}()
		}
	}()
	p, err := IdlePool(t.Context(), ln.Addr().String(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 3 {
		<-served
	}
	close(end)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := p.WaitEnded(ctx, 2); err != nil {
		t.Fatal(err)
	}
	p.Close()
	st := p.Status()
	if st[0].End != EndOpen || st[1].End != EndFIN || st[2].End != EndRST {
		t.Errorf("ends %v, want open, fin, rst", st)
	}
	if c := p.Counts(); c != (PoolCounts{Open: 1, FIN: 1, RST: 1}) {
		t.Errorf("counts %v", c)
	}
	if err := p.WaitEnded(ctx, 3); err == nil {
		t.Error("WaitEnded(3) on the closed pool = nil")
	}
}

func TestClassify(t *testing.T) {
	opErr := func(err error) error {
		return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", err)}
	}
	for err, want := range map[error]string{
		opErr(syscall.ECONNRESET):                ClassReset,
		opErr(syscall.EPIPE):                     ClassReset,
		opErr(syscall.ECONNREFUSED):              ClassRefused,
		io.EOF:                                   ClassEOF,
		fmt.Errorf("x: %w", io.ErrUnexpectedEOF): ClassEOF,
		errors.New("http2: server sent GOAWAY and closed the connection"): ClassEOF,
		errors.New("stream error: stream ID 3; INTERNAL_ERROR"):           ClassReset,
		context.DeadlineExceeded:                                          ClassTimeout,
		os.ErrDeadlineExceeded:                                            ClassTimeout,
		errors.New("something else"):                                      ClassOther,
	} {
		if got := classify(err); got != want {
			t.Errorf("classify(%v) = %s, want %s", err, got, want)
		}
	}
}

func TestVersions(t *testing.T) {
	v, err := parseVersion("\nenvoy  version: 9e5580933739775e8bce696a57a2e1bc99368f23/1.40.0/Clean/RELEASE/BoringSSL\n")
	if err != nil || v != "1.40.0" {
		t.Errorf("parseVersion = %q, %v", v, err)
	}
	if _, err := parseVersion("nope"); err == nil {
		t.Error("parseVersion(nope) succeeded")
	}
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.40.0", "1.36.2", 1},
		{"1.9.0", "1.10.0", -1},
		{"1.36.2", "1.36.2", 0},
		{"1.41.0-dev", "1.41.0", -1},
		{"1.41.0-dev", "1.40.9", 1},
	} {
		if got := compareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("compareVersions(%s, %s) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestFindBinariesEnv(t *testing.T) {
	bins := BinariesTB(t)
	t.Setenv(EnvVarBinary, bins[len(bins)-1].Path)
	got, err := FindBinaries()
	if err != nil || len(got) != 1 || got[0] != bins[len(bins)-1] {
		t.Errorf("FindBinaries with $%s = %v, %v", EnvVarBinary, got, err)
	}
	t.Setenv(EnvVarBinary, "/nonexistent/envoy")
	if _, err := FindBinaries(); err == nil {
		t.Error("FindBinaries with a bad $ENVOY_BIN succeeded")
	}
}

// The pinned file parses, newest first, with the oldest and the newest line running the whole suite.
func TestPinnedVersions(t *testing.T) {
	pins, err := Pinned()
	if err != nil {
		t.Fatal(err)
	}
	if len(pins) < 2 || pins[0].Scope != ScopeSuite || pins[len(pins)-1].Scope != ScopeSuite {
		t.Fatalf("want the newest and the oldest line first and last, scope suite: %v", pins)
	}
	for i := 1; i < len(pins); i++ {
		if compareVersions(pins[i-1].Version, pins[i].Version) <= 0 {
			t.Errorf("%s is not newest first: %s before %s", VersionsFile, pins[i-1].Version, pins[i].Version)
		}
	}
	for _, bad := range []string{"1.40 suite", "1.40.0", "1.40.0 all", "v1.40.0 suite", "# only a comment"} {
		if _, err := parsePins(bad); err == nil {
			t.Errorf("parsePins(%q) succeeded", bad)
		}
	}
}
