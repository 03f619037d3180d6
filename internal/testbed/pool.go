package testbed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// ConnEnd is how a connection of a [Pool] ended.
type ConnEnd string

const (
	EndOpen  ConnEnd = "open"  // still open when the pool was closed
	EndFIN   ConnEnd = "fin"   // the peer closed it: a read returned io.EOF
	EndRST   ConnEnd = "rst"   // the peer reset it: a read returned ECONNRESET
	EndOther ConnEnd = "other" // the peer sent bytes, or another read error
)

// ConnStatus is the state of one connection of a [Pool].
type ConnStatus struct {
	End ConnEnd // EndOpen while it is open
	// At is when the end was seen; zero while the connection is open and for
	// connections the pool closed itself.
	At time.Time
	// Err is the read error (or a description of the unexpected bytes) for
	// EndOther, else nil.
	Err error
}

// PoolCounts counts the connections of a [Pool] by how they ended.
type PoolCounts struct{ Open, FIN, RST, Other int }

func (c PoolCounts) String() string {
	return fmt.Sprintf("open=%d fin=%d rst=%d other=%d", c.Open, c.FIN, c.RST, c.Other)
}

// Pool is a set of idle HTTP/1.1 keep-alive connections made by [IdlePool]
// that watches how the peer ends each one.
type Pool struct {
	conns   []net.Conn
	stopCtx func() bool // stops the context.AfterFunc that closes the pool
	wg      sync.WaitGroup
	done    chan struct{} // closed when every connection has ended

	mu      sync.Mutex
	status  []ConnStatus
	ended   int           // connections ended by the peer or an error
	changed chan struct{} // closed and replaced whenever ended grows
	closing bool          // Close has begun: read errors from now on are ours
}

// poolRequestTimeout bounds dialing and the one request of each connection of
// IdlePool.
const poolRequestTimeout = RequestTimeout

// IdlePool opens n HTTP/1.1 connections to addr, sends one GET / on each and
// reads its response (which must be 200 and must not ask to close the
// connection), then leaves them idle and watches them: a read that returns
// io.EOF marks a connection EndFIN, ECONNRESET EndRST, anything else
// (including bytes from the peer) EndOther. When ctx is done, or on Close,
// the connections still open are closed by the pool and stay EndOpen.
//
// Setting up is bounded by ctx and RequestTimeout per connection; on error
// every connection already open is closed.
func IdlePool(ctx context.Context, addr string, n int) (*Pool, error) {
	p := &Pool{done: make(chan struct{}), status: make([]ConnStatus, n), changed: make(chan struct{})}
	for i := range n {
		p.status[i].End = EndOpen
		c, br, err := idleConn(ctx, addr)
		if err != nil {
			for _, c := range p.conns {
				c.Close()
			}
			return nil, fmt.Errorf("testbed: IdlePool connection %d of %d: %w", i+1, n, err)
		}
		p.conns = append(p.conns, c)
		p.wg.Go(func() { p.watch(i, c, br) })
	}
	go func() {
		p.wg.Wait()
		close(p.done)
	}()
	p.stopCtx = context.AfterFunc(ctx, p.closeConns)
	return p, nil
}

// idleConn dials addr and does one keep-alive GET / on the connection.
func idleConn(ctx context.Context, addr string) (net.Conn, *bufio.Reader, error) {
	ctx, cancel := context.WithTimeout(ctx, poolRequestTimeout)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	br, err := func() (*bufio.Reader, error) {
		if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nUser-Agent: testbed-idlepool\r\n\r\n", addr); err != nil {
			return nil, err
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK || resp.Close {
			return nil, fmt.Errorf("response %s (Connection: close %t), want 200 keep-alive", resp.Status, resp.Close)
		}
		return br, nil
	}()
	if !stop() || err != nil {
		c.Close()
		return nil, nil, errors.Join(err, ctx.Err())
	}
	return c, br, nil
}

// watch blocks reading connection i until the peer ends it or Close.
func (p *Pool) watch(i int, c net.Conn, br *bufio.Reader) {
	var b [1]byte
	n, err := br.Read(b[:])
	st := ConnStatus{End: EndOther, At: time.Now()}
	switch {
	case n > 0:
		st.Err = fmt.Errorf("unexpected byte %q from the idle connection", b[0])
	case errors.Is(err, io.EOF):
		st.End = EndFIN
	case errors.Is(err, syscall.ECONNRESET):
		st.End = EndRST
	default:
		st.Err = err
	}
	c.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing && st.End == EndOther {
		return // our own Close ended the read: still EndOpen
	}
	p.status[i] = st
	p.ended++
	close(p.changed)
	p.changed = make(chan struct{})
}

// WaitEnded waits until at least k connections have ended other than by the
// pool's own Close (by FIN, RST or an error); it returns ctx's error if ctx is
// done first, and an error if the pool was closed with fewer ended.
func (p *Pool) WaitEnded(ctx context.Context, k int) error {
	for {
		p.mu.Lock()
		ended, changed := p.ended, p.changed
		p.mu.Unlock()
		if ended >= k {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d connections ended: %w", ended, k, context.Cause(ctx))
		case <-p.done:
			p.mu.Lock()
			ended = p.ended
			p.mu.Unlock()
			if ended >= k {
				return nil
			}
			return fmt.Errorf("pool closed with %d of %d connections ended", ended, k)
		case <-changed:
		}
	}
}

// Len returns the number of connections.
func (p *Pool) Len() int { return len(p.status) }

// Status returns the state of each connection, in the order they were opened.
func (p *Pool) Status() []ConnStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ConnStatus(nil), p.status...)
}

// Counts returns the number of connections by how they ended (so far).
func (p *Pool) Counts() PoolCounts {
	var c PoolCounts
	for _, st := range p.Status() {
		switch st.End {
		case EndOpen:
			c.Open++
		case EndFIN:
			c.FIN++
		case EndRST:
			c.RST++
		default:
			c.Other++
		}
	}
	return c
}

// Done returns a channel that is closed once every connection has ended,
// by the peer or by Close (or ctx).
func (p *Pool) Done() <-chan struct{} { return p.done }

// Close closes the connections still open (they stay EndOpen) and waits
// until every watcher has finished; then Status and Counts are final. It is
// idempotent.
func (p *Pool) Close() {
	p.stopCtx()
	p.closeConns()
	<-p.done
}

func (p *Pool) closeConns() {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}
