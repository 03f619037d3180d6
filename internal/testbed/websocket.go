package testbed

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// WebSocketPath is the Upstream's WebSocket endpoint: GET with "Upgrade: websocket" answers 101 and then
// echoes every byte (frames are not parsed: Envoy passes an upgraded connection's bytes through as they are)
// until the peer closes. Envoy routes it only with Options.WebSocket.
const WebSocketPath = "/ws"

// wsGUID is RFC 6455's key suffix for Sec-WebSocket-Accept.
const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// handleWebSocket answers a WebSocket upgrade and echoes the connection until the peer closes it.
func handleWebSocket(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Sec-WebSocket-Key")
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || key == "" {
		http.Error(w, "want a WebSocket upgrade", http.StatusBadRequest)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "no hijacking on this connection", http.StatusInternalServerError)
		return
	}
	c, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", wsAccept(key))
	if rw.Flush() != nil {
		return
	}
	io.Copy(c, rw) // until the peer (Envoy) closes
}

// WebSockets are open WebSocket connections through Envoy, held until Close.
type WebSockets struct {
	conns []net.Conn
	once  sync.Once
}

// OpenWebSockets opens n WebSocket connections to addr (Envoy's HTTP listener with Options.WebSocket) at
// WebSocketPath, each upgraded (101) and echoing a first message, within ctx.
func OpenWebSockets(ctx context.Context, addr string, n int) (*WebSockets, error) {
	ws := &WebSockets{}
	for i := range n {
		c, err := openWebSocket(ctx, addr, i)
		if err != nil {
			ws.Close()
			return nil, fmt.Errorf("websocket %d to %s: %w", i, addr, err)
		}
		ws.conns = append(ws.conns, c)
	}
	return ws, nil
}

func openWebSocket(ctx context.Context, addr string, i int) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	key := base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("testbed-key-%04d", i)))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: testbed\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", WebSocketPath, key)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != wsAccept(key) {
		c.Close()
		return nil, fmt.Errorf("upgrade answered %s (accept %q)", resp.Status, resp.Header.Get("Sec-WebSocket-Accept"))
	}
	// One message through (unframed bytes: the upstream echoes them), so the upgrade is known to be complete.
	msg := []byte("ping")
	if _, err := c.Write(msg); err != nil {
		c.Close()
		return nil, err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(br, buf); err != nil {
		c.Close()
		return nil, fmt.Errorf("echo: %w", err)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// Len is the number of connections opened.
func (w *WebSockets) Len() int { return len(w.conns) }

// Open reports how many of the connections still echo a message within d: those Envoy has not closed.
func (w *WebSockets) Open(d time.Duration) int {
	n := 0
	for _, c := range w.conns {
		c.SetDeadline(time.Now().Add(d))
		buf := make([]byte, 4)
		if _, err := c.Write([]byte("pong")); err == nil {
			if _, err := io.ReadFull(c, buf); err == nil {
				n++
			}
		}
		c.SetDeadline(time.Time{})
	}
	return n
}

// Close closes every connection.
func (w *WebSockets) Close() {
	w.once.Do(func() {
		for _, c := range w.conns {
			c.Close()
		}
	})
}
