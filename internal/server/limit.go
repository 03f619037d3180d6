package server

import (
	"net"
	"sync"
)

// DefaultMaxConnections is the default cap on the API's open connections: twice DefaultMaxWaiters, so
// probes, /status and refused callers still get through while the waiters are full. Any connection costs
// about 21 kB while net/http serves it (measured with bench/waitercost); with the defaults a flood of
// 5,128 concurrent /shutdown callers took serve to 25 MB RSS, against 115 MB without the caps.
const DefaultMaxConnections = 256

// LimitListener returns a listener that keeps at most n of ln's connections open at once: beyond n,
// Accept waits for one to close, and new clients wait in the kernel's accept queue, where they cost the
// process no memory. Without it a flood of concurrent clients costs the process memory in proportion (5,128
// at once: 136 MB), even when each of them is refused at once.
func LimitListener(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	slots     chan struct{}
	closeOnce sync.Once
	closed    chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
