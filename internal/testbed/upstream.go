package testbed

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// MaxSleep bounds the d parameter of the upstream's /sleep endpoint.
const MaxSleep = 10 * time.Minute

// Upstream is a local origin for Envoy's clusters:
//
//   - HTTPAddr serves HTTP/1.1 and h2c (HTTP/2 with prior knowledge):
//     GET / answers 200 "ok";
//     GET /sleep?d=3s sleeps d (a Go duration, at most [MaxSleep]), or until
//     the request's context is done, then answers 200 "slept".
//     GET /ws upgrades to a WebSocket that echoes ([WebSocketPath]).
//     Any other path answers 404.
//   - TCPAddr echoes every byte back until the peer closes.
//
// Both listen on 127.0.0.1 with a kernel-chosen port (StartUpstream) or where StartUpstreamOn says.
type Upstream struct {
	HTTPAddr string // "127.0.0.1:PORT" of the HTTP server
	TCPAddr  string // "127.0.0.1:PORT" of the TCP echo server

	srv   *http.Server
	tcpLn net.Listener

	mu    sync.Mutex
	conns map[net.Conn]struct{} // open echo connections; nil once closed
	wg    sync.WaitGroup        // HTTP serve loop, echo accept loop and echo connections

	closeOnce sync.Once
}

// StartUpstream starts an Upstream on 127.0.0.1; Close stops it.
func StartUpstream() (*Upstream, error) { return StartUpstreamOn("127.0.0.1:0", "127.0.0.1:0") }

// StartUpstreamOn starts an Upstream whose HTTP server listens on httpAddr and whose TCP echo server listens
// on tcpAddr (for instance ":8080" in a container: test/e2e's upstream image runs it so); Close stops it.
func StartUpstreamOn(httpAddr, tcpAddr string) (*Upstream, error) {
	httpLn, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return nil, err
	}
	tcpLn, err := net.Listen("tcp", tcpAddr)
	if err != nil {
		httpLn.Close()
		return nil, err
	}
	protos := new(http.Protocols)
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("GET /sleep", handleSleep)
	mux.HandleFunc("GET "+WebSocketPath, handleWebSocket)
	u := &Upstream{
		HTTPAddr: httpLn.Addr().String(),
		TCPAddr:  tcpLn.Addr().String(),
		srv: &http.Server{
			Handler:           mux,
			Protocols:         protos,
			ReadHeaderTimeout: 10 * time.Second,
		},
		tcpLn: tcpLn,
		conns: make(map[net.Conn]struct{}),
	}
	u.wg.Add(2)
	go func() {
		defer u.wg.Done()
		u.srv.Serve(httpLn) // returns http.ErrServerClosed on Close
	}()
	go func() {
		defer u.wg.Done()
		u.acceptEcho()
	}()
	return u, nil
}

func handleSleep(w http.ResponseWriter, r *http.Request) {
	d, err := time.ParseDuration(r.URL.Query().Get("d"))
	if err != nil || d < 0 || d > MaxSleep {
		http.Error(w, fmt.Sprintf("want d=<duration between 0 and %v>", MaxSleep), http.StatusBadRequest)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		io.WriteString(w, "slept")
	case <-r.Context().Done():
		// The client (Envoy) went away; nobody reads an answer.
	}
}

// acceptEcho accepts echo connections until the listener is closed (by Close).
func (u *Upstream) acceptEcho() {
	for {
		c, err := u.tcpLn.Accept()
		if errors.Is(err, net.ErrClosed) {
			return // Close was called
		}
		if err != nil {
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: back off like net/http does
			continue
		}
		u.mu.Lock()
		if u.conns == nil { // closed meanwhile
			u.mu.Unlock()
			c.Close()
			return
		}
		u.conns[c] = struct{}{}
		u.wg.Add(1)
		u.mu.Unlock()
		go func() {
			defer u.wg.Done()
			io.Copy(c, c) // until EOF, error, or Close closes c
			c.Close()
			u.mu.Lock()
			delete(u.conns, c)
			u.mu.Unlock()
		}()
	}
}

// Close closes both listeners and every open connection, and waits for the
// server goroutines to finish. It is idempotent.
func (u *Upstream) Close() {
	u.closeOnce.Do(func() {
		u.srv.Close()
		u.tcpLn.Close()
		u.mu.Lock()
		for c := range u.conns {
			c.Close()
		}
		u.conns = nil
		u.mu.Unlock()
		u.wg.Wait()
	})
}
