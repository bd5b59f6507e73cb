//go:build e2e && linux

package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// balancer is a round-robin TCP load balancer on loopback, standing in for the Service
// in front of the manager replicas: each accepted connection is proxied to the next
// backend in turn, and a backend whose dial fails (a killed replica refuses connections)
// is skipped for the one after it. It looks at no bytes, so what a client sees through it
// is what the replicas answered.
type balancer struct {
	addr     string
	backends []string
	l        net.Listener
	next     atomic.Uint64

	// proxied counts, per backend, the connections proxied to it; refused counts the
	// dials it refused.
	proxied []atomic.Int64
	refused []atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// startBalancer listens on a loopback port and proxies every connection to one of
// backends (host:port), in turn; it closes when the test ends.
func startBalancer(t *testing.T, backends ...string) *balancer {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &balancer{
		addr:     l.Addr().String(),
		backends: slices.Clone(backends),
		l:        l,
		proxied:  make([]atomic.Int64, len(backends)),
		refused:  make([]atomic.Int64, len(backends)),
		conns:    make(map[net.Conn]struct{}),
	}
	b.wg.Add(1)
	go b.serve()
	t.Cleanup(b.Close)
	return b
}

func (b *balancer) serve() {
	defer b.wg.Done()
	for {
		c, err := b.l.Accept()
		if err != nil {
			return // closed
		}
		if !b.track(c) {
			_ = c.Close()
			return
		}
		b.wg.Add(1)
		go b.proxy(c)
	}
}

// track remembers an open connection so that Close can cut it; false once closed.
func (b *balancer) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

func (b *balancer) untrack(c net.Conn) {
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
	_ = c.Close()
}

// proxy connects c to the next backend that accepts a connection and copies both ways
// until both sides are done; without any, it closes c.
func (b *balancer) proxy(c net.Conn) {
	defer b.wg.Done()
	defer b.untrack(c)
	up := b.dial()
	if up == nil || !b.track(up) {
		if up != nil {
			_ = up.Close()
		}
		return
	}
	defer b.untrack(up)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.copyHalf(up, c)
	}()
	b.copyHalf(c, up)
	<-done
}

// copyHalf copies one direction. A clean end (EOF) is passed on as a half close, so that
// a response still on its way is delivered; an error (a reset, a backend killed mid-way)
// cuts both connections, so that the client learns at once.
func (b *balancer) copyHalf(dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		_ = src.Close()
		return
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// dial returns a connection to the next backend in turn that accepts one, or nil.
func (b *balancer) dial() net.Conn {
	start := int(b.next.Add(1) - 1)
	for i := range b.backends {
		idx := (start + i) % len(b.backends)
		d := net.Dialer{Timeout: 5 * time.Second}
		up, err := d.DialContext(context.Background(), "tcp", b.backends[idx])
		if err != nil {
			b.refused[idx].Add(1)
			continue
		}
		b.proxied[idx].Add(1)
		return up
	}
	return nil
}

// counts returns, per backend, the connections proxied to it and the dials it refused.
func (b *balancer) counts() (proxied, refused []int64) {
	for i := range b.backends {
		proxied = append(proxied, b.proxied[i].Load())
		refused = append(refused, b.refused[i].Load())
	}
	return proxied, refused
}

// Close stops accepting, cuts every open connection and waits for the proxying to end.
func (b *balancer) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	_ = b.l.Close()
	for c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// startNamedBackend serves a TCP backend that answers every connection with its name
// and closes it; hold, when set, makes it answer nothing and keep the connection open.
func startNamedBackend(t *testing.T, name string, hold bool) string {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if hold {
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
				continue
			}
			_, _ = io.WriteString(c, name)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

// deadAddress returns a loopback address nothing listens on any more.
func deadAddress(t *testing.T) string {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// readThrough opens a connection through the balancer and returns all it reads.
func readThrough(t *testing.T, addr string) string {
	t.Helper()
	c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading through the balancer: %v", err)
	}
	return string(data)
}

// The balancer the replica test relies on: connections go to the backends in turn, a
// backend that refuses the dial is skipped for the next, and Close cuts open connections.
func TestBalancerRoundRobinSkipsDeadBackends(t *testing.T) {
	b := startBalancer(t, startNamedBackend(t, "a", false), deadAddress(t), startNamedBackend(t, "b", false))
	var got []string
	for range 6 {
		got = append(got, readThrough(t, b.addr))
	}
	// Turns 0, 1, 2 go to a, the dead backend (so on to b), and b.
	if want := []string{"a", "b", "b", "a", "b", "b"}; !slices.Equal(got, want) {
		t.Errorf("answers through the balancer: %v, want %v", got, want)
	}
	proxied, refused := b.counts()
	if !slices.Equal(proxied, []int64{2, 0, 4}) || !slices.Equal(refused, []int64{0, 2, 0}) {
		t.Errorf("proxied %v and refused %v, want [2 0 4] and [0 2 0]", proxied, refused)
	}

	// A connection whose backend never answers is cut by Close, not left hanging.
	held := startBalancer(t, startNamedBackend(t, "silent", true))
	c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", held.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testutil.Eventually(t, 10*time.Second, "the balancer to proxy the connection", func() error {
		if proxied, _ := held.counts(); proxied[0] == 0 {
			return errors.New("not proxied yet")
		}
		return nil
	})
	held.Close()
	// The deadline only bounds how long a broken Close takes to fail.
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("reading a connection the balancer closed: %v, want EOF or a reset", err)
	}
}
