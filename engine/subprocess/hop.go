//go:build unix

package subprocess

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// hopClient posts JSON to the child over loopback HTTP/1.1 on the
// caller's own goroutine: it writes the request on a kept-open connection
// and reads the answer with http.ReadResponse. net/http's Transport hands
// each exchange to a connection's read and write goroutines and back,
// which on loopback cost about half again the round trip itself (50-53 µs
// against 34-36 µs measured); a serve makes one such exchange in its
// metered window.
//
// A connection is kept only after its answer was read to the end, without
// "Connection: close", and while no cancellation has touched it. Because
// no goroutine reads an idle connection, the server's closing it is
// noticed when it is next taken (aliveIdle), before anything is written.
// A serve is not idempotent, so a request is sent again only when none of
// it reached the connection: once any byte is written the child may have
// begun serving, and a failure is the caller's to see.
type hopClient struct {
	dialer      net.Dialer
	maxIdle     int
	idleTimeout time.Duration

	mu     sync.Mutex
	idle   []*hopConn // most recently used last
	closed bool       // keeps nothing more (the engine stopped)
}

// maxKeptRequest bounds the request buffer a connection keeps for reuse.
const maxKeptRequest = 64 << 10

func newHopClient(maxIdle int, idleTimeout time.Duration) *hopClient {
	return &hopClient{maxIdle: maxIdle, idleTimeout: idleTimeout}
}

// hopConn is one connection and its reader, kept across exchanges.
type hopConn struct {
	host   string
	c      net.Conn
	br     *bufio.Reader
	req    []byte // the last request's bytes, reused for the next
	idleAt time.Time
	reused bool
}

// post sends body (JSON) to base+path (base is http://host:port) and
// returns the answer; its Body must be read to the end or closed. A
// failure before the answer is a *url.Error, as http.Client gives it.
func (h *hopClient) post(ctx context.Context, base, path string, body []byte) (*http.Response, error) {
	host, ok := strings.CutPrefix(base, "http://")
	if !ok {
		return nil, fmt.Errorf("engine address %q is not http://host:port", base)
	}
	resp, err := h.exchange(ctx, host, path, body)
	if err != nil {
		return nil, &url.Error{Op: "Post", URL: base + path, Err: err}
	}
	return resp, nil
}

func (h *hopClient) exchange(ctx context.Context, host, path string, body []byte) (*http.Response, error) {
	for retried := false; ; retried = true {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hc := h.take(host)
		if hc == nil {
			c, err := h.dialer.DialContext(ctx, "tcp", host)
			if err != nil {
				return nil, err
			}
			hc = &hopConn{host: host, c: c, br: bufio.NewReaderSize(c, 4096)}
		}
		// The context's end, cancelled or at its deadline, breaks off the
		// blocking reads and writes by closing the connection, which also
		// tells the child to stop. (A deadline set on the connection
		// would fire before the context's own timer, and the caller
		// would see a timeout the context does not yet explain.)
		stop := func() bool { return true }
		if ctx.Done() != nil {
			c := hc.c
			stop = context.AfterFunc(ctx, func() { c.Close() })
		}
		hc.req = appendRequest(hc.req[:0], host, path, body)
		n, err := hc.c.Write(hc.req)
		if cap(hc.req) > maxKeptRequest {
			hc.req = nil // a long prompt's copy is not held while idle
		}
		// The trace's WroteRequest is what callers (and tests) wait on
		// to know that a request is with the child.
		if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.WroteRequest != nil {
			trace.WroteRequest(httptrace.WroteRequestInfo{Err: err})
		}
		if err != nil {
			stop()
			hc.c.Close()
			if n == 0 && hc.reused && !retried && ctx.Err() == nil {
				continue // nothing was sent: a fresh connection may take it
			}
			return nil, err
		}
		resp, err := http.ReadResponse(hc.br, nil)
		if err != nil {
			stop()
			hc.c.Close()
			// Even with no byte of an answer, the child may have begun
			// serving: not sent again.
			return nil, err
		}
		resp.Body = &hopBody{h: h, hc: hc, body: resp.Body, stop: stop, keep: !resp.Close}
		return resp, nil
	}
}

// appendRequest appends the POST's bytes: the headers http.Client sends
// for it, less the compression it is told not to ask for.
func appendRequest(b []byte, host, path string, body []byte) []byte {
	b = append(b, "POST "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\nContent-Type: application/json\r\n\r\n"...)
	return append(b, body...)
}

// take returns an idle connection to host that is still open, or nil.
func (h *hopClient) take(host string) *hopConn {
	now := time.Now()
	for {
		h.mu.Lock()
		var hc *hopConn
		for i := len(h.idle) - 1; i >= 0; i-- {
			if h.idle[i].host == host {
				hc = h.idle[i]
				h.idle = append(h.idle[:i], h.idle[i+1:]...)
				break
			}
		}
		h.mu.Unlock()
		if hc == nil {
			return nil
		}
		if now.Sub(hc.idleAt) < h.idleTimeout && aliveIdle(hc.c) {
			hc.reused = true
			return hc
		}
		hc.c.Close()
	}
}

// put keeps hc for the next exchange, or closes it when enough are kept.
func (h *hopClient) put(hc *hopConn) {
	hc.idleAt = time.Now()
	h.mu.Lock()
	if !h.closed && len(h.idle) < h.maxIdle {
		h.idle = append(h.idle, hc)
		hc = nil
	}
	h.mu.Unlock()
	if hc != nil {
		hc.c.Close()
	}
}

// closeIdle closes the kept connections (the child they lead to is gone
// or going).
func (h *hopClient) closeIdle() { h.closeIdleFor(false) }

// close closes the kept connections, and those of exchanges still under
// way as they end.
func (h *hopClient) close() { h.closeIdleFor(true) }

func (h *hopClient) closeIdleFor(forGood bool) {
	h.mu.Lock()
	h.closed = h.closed || forGood
	idle := h.idle
	h.idle = nil
	h.mu.Unlock()
	for _, hc := range idle {
		hc.c.Close()
	}
}

// aliveIdle says whether an idle connection is still open and quiet: a
// non-blocking read finds nothing to read. End of file means the server
// closed it; any byte is one no request asked for. Either way it is not
// reused (the byte, read, is lost with it).
func aliveIdle(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, rerr := syscall.Read(int(fd), buf[:])
		alive = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true // never wait: the answer is now
	})
	return err == nil && alive
}

// hopBody is an answer's body. Read to its end, it gives its connection
// back for reuse; closed before that, it closes the connection (draining
// could wait on a stream for as long as the child serves).
type hopBody struct {
	h    *hopClient
	hc   *hopConn
	body io.ReadCloser
	stop func() bool // unregisters the cancellation; false once it ran
	keep bool        // the answer allows the connection's reuse
	err  error       // what Read answers once the body has ended
}

func (b *hopBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.body.Read(p)
	if err != nil {
		b.err = err
		b.finish(err == io.EOF)
	}
	return n, err
}

func (b *hopBody) Close() error {
	if b.err == nil {
		b.err = errReadAfterClose
		b.finish(false)
	}
	return nil
}

var errReadAfterClose = errors.New("read on a closed engine response body")

func (b *hopBody) finish(complete bool) {
	hc := b.hc
	// stop false: the cancellation closed the connection, or is closing it.
	if b.stop() && complete && b.keep && hc.br.Buffered() == 0 {
		b.h.put(hc)
		return
	}
	hc.c.Close()
}
