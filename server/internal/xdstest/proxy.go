package xdstest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards loopback TCP connections to a server. Freeze makes the
// connections open at the time stop moving data, in both directions,
// while they stay open and the kernel still acknowledges what is sent to
// them: a stream that hangs without failing. Connections made after it
// are forwarded as before.
type Proxy struct {
	// Addr is the proxy's loopback host:port.
	Addr string

	l      net.Listener
	target string

	mu     sync.Mutex
	conns  int
	frozen []chan struct{} // one per connection: closed when it freezes
	closed bool
	open   []net.Conn
}

// NewProxy forwards to target until t ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: l.Addr().String(), l: l, target: target}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *Proxy) accept() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		freeze := make(chan struct{})
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			in.Close()
			out.Close()
			return
		}
		p.conns++
		p.frozen = append(p.frozen, freeze)
		p.open = append(p.open, in, out)
		p.mu.Unlock()
		go forward(out, in, freeze)
		go forward(in, out, freeze)
	}
}

// forward copies src to dst until either fails, or until freeze is
// closed: then it reads no more, and holds what it read.
func forward(dst, src net.Conn, freeze <-chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-freeze:
			return // neither reads nor writes again; the connection stays open
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err == io.EOF {
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
			}
			return
		}
	}
}

// Freeze stops the connections open now from moving data.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.frozen {
		select {
		case <-f:
		default:
			close(f)
		}
	}
}

// Conns is the number of connections accepted so far.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns
}

func (p *Proxy) close() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.open {
		c.Close()
	}
}
