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
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"meshd/engine"
)

// rawServer is an HTTP/1.1 server written by hand, so that a test can
// answer exactly as it wants: tear an answer, keep or close a connection
// against what it announced. answer writes one request's answer and says
// whether to read the next request on the connection.
type rawServer struct {
	t      *testing.T
	ln     net.Listener
	answer func(c net.Conn, req *http.Request, body string, n int) bool

	mu       sync.Mutex
	accepted int
	requests []string // each request's body, in order
	closed   chan int // a connection's number once it ends
	wg       sync.WaitGroup
}

func newRawServer(t *testing.T, answer func(c net.Conn, req *http.Request, body string, n int) bool) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{t: t, ln: ln, answer: answer, closed: make(chan int, 16)}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) base() string { return "http://" + s.ln.Addr().String() }

func (s *rawServer) accept() {
	defer s.wg.Done()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.accepted++
		id := s.accepted
		s.mu.Unlock()
		conns = append(conns, c)
		s.wg.Add(1)
		go s.serve(c, id)
	}
}

func (s *rawServer) serve(c net.Conn, id int) {
	defer s.wg.Done()
	defer func() { s.closed <- id }()
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.requests = append(s.requests, string(body))
		n := len(s.requests)
		s.mu.Unlock()
		if !s.answer(c, req, string(body), n) {
			return
		}
	}
}

func (s *rawServer) counts() (accepted, requests int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted, len(s.requests)
}

// echo answers with the request's method, path, headers and body, with a
// Content-Length, keeping the connection.
func echo(c net.Conn, req *http.Request, body string, _ int) bool {
	text := fmt.Sprintf("%s %s host=%s type=%s len=%d %s", req.Method, req.URL.Path, req.Host,
		req.Header.Get("Content-Type"), req.ContentLength, body)
	fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(text), text)
	return true
}

func hopPost(t *testing.T, h *hopClient, ctx context.Context, base, body string) (string, error) {
	t.Helper()
	resp, err := h.post(ctx, base, "/completion", []byte(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return string(data), err
	}
	if resp.StatusCode != http.StatusOK {
		return string(data), fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return string(data), nil
}

func idleCount(h *hopClient) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.idle)
}

func TestHopReusesConnection(t *testing.T) {
	s := newRawServer(t, echo)
	h := newHopClient(2, time.Minute)
	defer h.closeIdle()
	host := strings.TrimPrefix(s.base(), "http://")
	for i := range 3 {
		body := fmt.Sprintf(`{"n":%d}`, i)
		got, err := hopPost(t, h, context.Background(), s.base(), body)
		if err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
		want := fmt.Sprintf("POST /completion host=%s type=application/json len=%d %s", host, len(body), body)
		if got != want {
			t.Fatalf("post %d: the server saw %q, want %q", i, got, want)
		}
		if n := idleCount(h); n != 1 {
			t.Fatalf("post %d: %d idle connections after the answer, want 1", i, n)
		}
	}
	if a, r := s.counts(); a != 1 || r != 3 {
		t.Fatalf("%d connections for %d requests, want 1 for 3", a, r)
	}
}

// An idle connection the server has closed is not used: the next
// request goes out on a fresh one and is answered.
func TestHopServerClosedIdle(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close func(c net.Conn) bool // whether the server reads on
	}{
		{"close", func(c net.Conn) bool { c.Close(); return false }},
		{"reset", func(c net.Conn) bool { c.(*net.TCPConn).SetLinger(0); c.Close(); return false }},
		{"stray byte", func(c net.Conn) bool { io.WriteString(c, "x"); return true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			act := make(chan struct{})
			s := newRawServer(t, func(c net.Conn, req *http.Request, body string, n int) bool {
				echo(c, req, body, n)
				if n == 1 {
					<-act // the answer is read and its connection idle
					return tc.close(c)
				}
				return true
			})
			h := newHopClient(2, time.Minute)
			defer h.closeIdle()
			if _, err := hopPost(t, h, context.Background(), s.base(), "one"); err != nil {
				close(act)
				t.Fatal(err)
			}
			h.mu.Lock()
			idle := slices.Clone(h.idle)
			h.mu.Unlock()
			close(act)
			if len(idle) != 1 {
				t.Fatalf("%d idle connections after an answer, want 1", len(idle))
			}
			c := idle[0].c
			// The close reaches the client's socket on its own time.
			eventually(t, "the client's socket to see the close", func() bool {
				return !peekAlive(c)
			})
			got, err := hopPost(t, h, context.Background(), s.base(), "two")
			if err != nil || !strings.HasSuffix(got, " two") {
				t.Fatalf("after the server closed the idle connection: %q, %v", got, err)
			}
			if a, r := s.counts(); a != 2 || r != 2 {
				t.Fatalf("%d connections for %d requests, want 2 for 2", a, r)
			}
		})
	}
}

// peekAlive is aliveIdle without consuming a stray byte, so that a test
// can wait for the server's doing to reach the socket.
func peekAlive(c net.Conn) bool {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		alive = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true
	})
	return alive
}

// An answer that says Connection: close ends its connection, even when
// the server leaves it open.
func TestHopConnectionClose(t *testing.T) {
	s := newRawServer(t, func(c net.Conn, req *http.Request, body string, n int) bool {
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		return true // the server would read another request
	})
	h := newHopClient(2, time.Minute)
	defer h.closeIdle()
	for i, body := range []string{"one", "two"} {
		got, err := hopPost(t, h, context.Background(), s.base(), body)
		if err != nil || got != body {
			t.Fatalf("post %d: %q, %v", i, got, err)
		}
		if n := idleCount(h); n != 0 {
			t.Fatalf("post %d: %d idle connections after Connection: close", i, n)
		}
		if id := <-s.closed; id != i+1 {
			t.Fatalf("connection %d ended, want %d", id, i+1)
		}
	}
	if a, r := s.counts(); a != 2 || r != 2 {
		t.Fatalf("%d connections for %d requests, want 2 for 2", a, r)
	}
}

func TestHopChunked(t *testing.T) {
	s := newRawServer(t, func(c net.Conn, req *http.Request, body string, n int) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
		for _, piece := range []string{"data: ", body, "\n\n", "data: [DONE]\n\n"} {
			fmt.Fprintf(c, "%x\r\n%s\r\n", len(piece), piece)
		}
		io.WriteString(c, "0\r\nX-Trailer: yes\r\n\r\n")
		return true
	})
	h := newHopClient(2, time.Minute)
	defer h.closeIdle()
	for i, body := range []string{"one", "two", "three"} {
		got, err := hopPost(t, h, context.Background(), s.base(), body)
		if want := "data: " + body + "\n\ndata: [DONE]\n\n"; err != nil || got != want {
			t.Fatalf("post %d: %q, %v; want %q", i, got, err, want)
		}
	}
	if a, r := s.counts(); a != 1 || r != 3 {
		t.Fatalf("%d connections for %d requests, want 1 for 3", a, r)
	}
}

// A torn answer fails the request, is not sent again (the child may
// have begun serving it), and leaves nothing behind: the next request
// gets a fresh connection.
func TestHopTornResponse(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		atPost       bool // the tear shows in post, not in reading the body
	}{
		{"no answer", "", true},
		{"in the status line", "HTTP/1.1 20", true},
		{"in the headers", "HTTP/1.1 200 OK\r\nContent-Le", true},
		{"in a sized body", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789", false},
		{"in a chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n01234", false},
		{"before the last chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRawServer(t, func(c net.Conn, req *http.Request, body string, n int) bool {
				if n == 2 { // the first request on a reused connection tears
					io.WriteString(c, tc.answer)
					return false
				}
				return echo(c, req, body, n)
			})
			h := newHopClient(2, time.Minute)
			defer h.closeIdle()
			if _, err := hopPost(t, h, context.Background(), s.base(), "one"); err != nil {
				t.Fatal(err)
			}
			resp, err := h.post(context.Background(), s.base(), "/completion", []byte("two"))
			if tc.atPost {
				if err == nil {
					resp.Body.Close()
					t.Fatal("a torn answer was taken")
				}
			} else {
				if err != nil {
					t.Fatalf("post: %v", err)
				}
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("reading a torn body: %v, want %v", err, io.ErrUnexpectedEOF)
				}
			}
			if a, r := s.counts(); a != 1 || r != 2 {
				t.Fatalf("%d connections for %d requests after the tear, want 1 for 2 (sent once)", a, r)
			}
			if n := idleCount(h); n != 0 {
				t.Fatalf("%d idle connections after a torn answer", n)
			}
			if got, err := hopPost(t, h, context.Background(), s.base(), "three"); err != nil || !strings.HasSuffix(got, " three") {
				t.Fatalf("after the tear: %q, %v", got, err)
			}
			if a, r := s.counts(); a != 2 || r != 3 {
				t.Fatalf("%d connections for %d requests, want 2 for 3", a, r)
			}
		})
	}
}

// Cancelling the context, or its deadline passing, while an answer is
// awaited or half read closes the connection (which tells the child),
// and the next request gets a fresh one. The server waits for the client
// to close: a request that ignored its context would hang the test.
func TestHopCancellation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		headers  bool // the answer's headers and part of its body are sent
		deadline bool // a deadline ends the wait, not a cancel
	}{
		{"cancel awaiting the answer", false, false},
		{"cancel mid-body", true, false},
		{"deadline awaiting the answer", false, true},
		{"deadline mid-body", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent := make(chan struct{})
			s := newRawServer(t, func(c net.Conn, req *http.Request, body string, n int) bool {
				if body != "hang" {
					return echo(c, req, body, n)
				}
				if tc.headers {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
				}
				close(sent)
				io.Copy(io.Discard, c) // until the client closes
				return false
			})
			h := newHopClient(2, time.Minute)
			defer h.closeIdle()
			if _, err := hopPost(t, h, context.Background(), s.base(), "warm"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			if tc.deadline {
				ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
			}
			defer cancel()
			type result struct {
				data string
				err  error
			}
			done := make(chan result, 1)
			gotPart := make(chan struct{})
			go func() {
				resp, err := h.post(ctx, s.base(), "/completion", []byte("hang"))
				if err != nil {
					done <- result{err: err}
					return
				}
				defer resp.Body.Close()
				part := make([]byte, 10)
				if _, err := io.ReadFull(resp.Body, part); err != nil {
					done <- result{err: err}
					return
				}
				close(gotPart)
				rest, err := io.ReadAll(resp.Body)
				done <- result{string(part) + string(rest), err}
			}()
			switch {
			case tc.deadline:
			case tc.headers:
				<-gotPart
				cancel()
			default:
				<-sent
				cancel()
			}
			r := <-done
			if r.err == nil {
				t.Fatalf("the request outlived its context: %q", r.data)
			}
			if ctx.Err() == nil {
				t.Fatalf("the request failed before its context ended: %v", r.err)
			}
			if tc.headers && !tc.deadline && r.data != "0123456789" {
				t.Fatalf("read %q before the end, want the part sent", r.data)
			}
			if id := <-s.closed; id != 1 {
				t.Fatalf("connection %d ended, want 1", id)
			}
			if n := idleCount(h); n != 0 {
				t.Fatalf("%d idle connections after a broken-off request", n)
			}
			got, err := hopPost(t, h, context.Background(), s.base(), "after")
			if err != nil || !strings.HasSuffix(got, " after") {
				t.Fatalf("after the cancellation: %q, %v", got, err)
			}
		})
	}
}

// A connection idle for longer than the client keeps one is not reused.
func TestHopIdleTimeout(t *testing.T) {
	s := newRawServer(t, echo)
	h := newHopClient(2, time.Minute)
	defer h.closeIdle()
	if _, err := hopPost(t, h, context.Background(), s.base(), "one"); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.idle[0].idleAt = time.Now().Add(-2 * time.Minute)
	h.mu.Unlock()
	if _, err := hopPost(t, h, context.Background(), s.base(), "two"); err != nil {
		t.Fatal(err)
	}
	if id := <-s.closed; id != 1 {
		t.Fatalf("connection %d ended, want the stale one, 1", id)
	}
	if a, r := s.counts(); a != 2 || r != 2 {
		t.Fatalf("%d connections for %d requests, want 2 for 2", a, r)
	}
}

// Serves keep one connection to the child, and a child that goes down
// takes its kept connections with it: the restarted child is dialled
// afresh.
func TestServesKeepTheirConnection(t *testing.T) {
	noLeaks(t)
	e := startEngine(t, testConfig(t))
	ctx := serveCtx(t)
	kept := func() []*hopConn {
		e.hop.mu.Lock()
		defer e.hop.mu.Unlock()
		return slices.Clone(e.hop.idle)
	}
	var first *hopConn
	for i, opts := range []engine.Options{{}, {Emit: func([]byte) error { return nil }}, {}} {
		req, p := request(fmt.Sprintf("serve %d", i), 4)
		if _, err := e.ServeWith(ctx, req, p, opts); err != nil {
			t.Fatalf("serve %d: %v", i, err)
		}
		idle := kept()
		if len(idle) != 1 {
			t.Fatalf("serve %d: %d kept connections, want 1", i, len(idle))
		}
		if first == nil {
			first = idle[0]
		} else if idle[0] != first {
			t.Fatalf("serve %d went out on a new connection", i)
		}
	}
	pid := e.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the restart", func() bool { return e.Restarts() == 1 && e.PID() != 0 })
	if n := len(kept()); n != 0 {
		t.Fatalf("%d connections kept to the killed child", n)
	}
	req, p := request("after the restart", 4)
	if _, err := e.Serve(ctx, req, p); err != nil {
		t.Fatalf("serve after the restart: %v", err)
	}
	if idle := kept(); len(idle) != 1 || idle[0] == first || idle[0].host != strings.TrimPrefix(e.URL(), "http://") {
		t.Fatalf("after the restart: %d kept connections, want one new to %s", len(idle), e.URL())
	}
}

// Once closed, the client keeps no connection, not even that of an
// exchange under way when it closed.
func TestHopClosedKeepsNothing(t *testing.T) {
	s := newRawServer(t, echo)
	h := newHopClient(2, time.Minute)
	if _, err := hopPost(t, h, context.Background(), s.base(), "one"); err != nil {
		t.Fatal(err)
	}
	resp, err := h.post(context.Background(), s.base(), "/completion", []byte("two"))
	if err != nil {
		t.Fatal(err)
	}
	h.close() // with "two" under way on the connection "one" left idle
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := idleCount(h); n != 0 {
		t.Fatalf("%d connections kept after close", n)
	}
	if id := <-s.closed; id != 1 {
		t.Fatalf("connection %d ended, want 1", id)
	}
}
