package remote_test

import (
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// dyingProxy relays TCP to a node until it dies: then it accepts nothing
// new and cuts each open connection as soon as the front door sends on
// it, as a node that was killed looks to a connection pooled before.
type dyingProxy struct {
	ln    net.Listener
	dead  atomic.Bool
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func startDyingProxy(t *testing.T, target string) *dyingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dyingProxy{ln: ln}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { // node to front door
				defer p.wg.Done()
				io.Copy(c, up)
				c.Close()
			}()
			go func() { // front door to node, until the node dies
				defer p.wg.Done()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 && p.dead.Load() {
						// Whatever arrived never reaches the node.
						c.Close()
						up.Close()
						return
					}
					if n > 0 {
						if _, werr := up.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						up.Close()
						return
					}
				}
			}()
		}
	}()
	return p
}

// die stops the node behind the proxy: no new connection is accepted.
func (p *dyingProxy) die() {
	p.dead.Store(true)
	p.ln.Close()
}

// A node that dies while the front door holds a pooled connection to it:
// the next forward goes out on that connection, which fails before the
// node could have the prompt (the headers wait for its 100 Continue), so
// the serve falls over to the next node within the same request instead
// of failing as one the node may have served.
func TestStalePooledConnectionFallsOver(t *testing.T) {
	cheap, dear := startUpstream(t, 10), startUpstream(t, 50)
	proxy := startDyingProxy(t, strings.TrimPrefix(cheap.srv.URL, "http://"))
	front, _ := startNode(t, remoteBackend("cheap", cheap, "http://"+proxy.ln.Addr().String(), 10)+remoteBackend("dear", dear, dear.srv.URL, 50))
	if resp, err := serve(t, front, "first"); err != nil || resp.Sealed.Receipt.Backend != "cheap" {
		t.Fatalf("first serve: %v", err)
	}
	proxy.die()
	resp, err := serve(t, front, "second")
	if err != nil {
		t.Fatalf("second serve, after the node died: %v", err)
	}
	if resp.Sealed.Receipt.Backend != "dear" || !strings.HasPrefix(resp.Decision.Candidates[0].Reason, "failed: remote cheap") {
		t.Fatalf("second serve went to %s, first candidate %q: want dear, cheap failed", resp.Sealed.Receipt.Backend, resp.Decision.Candidates[0].Reason)
	}
	envs, err := cheap.n.Stores.Log.Range(t.Context(), 0, 10)
	if err != nil || len(envs) != 1 {
		t.Fatalf("the dead node's log holds %d receipts (%v): want only the first serve's", len(envs), err)
	}
}
