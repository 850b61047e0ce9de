package llamaserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/llama"
)

// decodeShape has an output matrix of its own: with the tied embeddings
// of newServerN's model greedy decoding repeats one token whatever the
// prompt, which would hide a sequence getting another's logits.
var decodeShape = gguf.Shape{Layers: 2, Dim: 64, Heads: 4, KVHeads: 2, FF: 96, Vocab: 400, Ctx: 128, Type: gguf.Q8_0, SeparateOutput: true}

func newDecodeServer(t *testing.T, slots, nCtx int, configure func(*Server)) (fixture, *httptest.Server, *llama.Model) {
	t.Helper()
	return newServerShape(t, decodeShape, slots, nCtx, configure)
}

// greedyReq is a greedy completion of n tokens that re-evaluates its
// whole prompt, so that its tokens depend on nothing a slot cached.
func greedyReq(prompt string, n int) map[string]any {
	return map[string]any{"prompt": prompt, "n_predict": n, "temperature": 0, "ignore_eos": true,
		"cache_prompt": false, "return_tokens": true}
}

type completed struct {
	tokens []int
	err    error
}

// complete posts a completion with ctx and returns its tokens; it may run
// on any goroutine.
func complete(ctx context.Context, url string, body map[string]any) completed {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/completion", bytes.NewReader(b))
	if err != nil {
		return completed{err: err}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return completed{err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return completed{err: err}
	}
	if resp.StatusCode != 200 {
		return completed{err: fmt.Errorf("status %d: %s", resp.StatusCode, raw)}
	}
	var r compResp
	if err := json.Unmarshal(raw, &r); err != nil {
		return completed{err: err}
	}
	return completed{tokens: r.Tokens}
}

// alone is what each body generates on a server of one slot, with
// nothing to share its steps with.
func alone(t *testing.T, bodies ...map[string]any) [][]int {
	t.Helper()
	f, ts, _ := newDecodeServer(t, 1, 64, nil)
	f.readyForTest(t)
	var out [][]int
	for _, b := range bodies {
		c := complete(context.Background(), ts.URL, b)
		if c.err != nil {
			t.Fatal(c.err)
		}
		out = append(out, c.tokens)
	}
	return out
}

// firstStepWaits holds the first decode step until n sequences have
// queued their first token, so that they decode together from the start
// however the prompts' evaluation was scheduled; with patience of the
// guard's length every later step waits for all of them too.
func firstStepWaits(s *Server, n int) {
	var queued atomic.Int32
	all := make(chan struct{})
	s.hooks.patience = guard
	s.hooks.decodeQueued = func(_, k int) {
		if k == 1 && queued.Add(1) == int32(n) {
			close(all)
		}
	}
	var once sync.Once
	s.hooks.gather = func() {
		once.Do(func() {
			select {
			case <-all:
			case <-time.After(guard): // the test's assertions on batching fail
			}
		})
	}
}

type healthStats struct {
	Steps   int64 `json:"decode_steps"`
	Batched int64 `json:"decode_steps_batched"`
	Tokens  int64 `json:"decode_tokens"`
}

func getHealth(t *testing.T, url string) healthStats {
	t.Helper()
	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h healthStats
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestConcurrentGreedyMatchesAlone runs two and three greedy completions
// at once, held so that they share every decode step, and checks each
// generates exactly what it does alone, that the steps did serve them
// together, and that /health counts it.
func TestConcurrentGreedyMatchesAlone(t *testing.T) {
	bodies := []map[string]any{greedyReq("alpha beta", 9), greedyReq("gamma", 7), greedyReq("delta epsilon zeta", 8)}
	want := alone(t, bodies...)
	for n := 2; n <= 3; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var mu sync.Mutex
			var sizes []int
			f, ts, _ := newDecodeServer(t, n, 64, func(s *Server) {
				firstStepWaits(s, n)
				s.hooks.step = func(k int) {
					mu.Lock()
					sizes = append(sizes, k)
					mu.Unlock()
				}
			})
			f.readyForTest(t)
			out := make(chan completed, n)
			for i := range n {
				go func() {
					c := complete(context.Background(), ts.URL, bodies[i])
					c.tokens = append([]int{i}, c.tokens...)
					out <- c
				}()
			}
			for range n {
				c := recv(t, out, "completion")
				if c.err != nil {
					t.Fatal(c.err)
				}
				if i := c.tokens[0]; !slices.Equal(c.tokens[1:], want[i]) {
					t.Errorf("completion %d with %d at once: %v, alone %v", i, n, c.tokens[1:], want[i])
				}
			}
			mu.Lock()
			defer mu.Unlock()
			// Every request's first token comes from its prompt; each
			// later one takes a decode step.
			total := 0
			for i := range n {
				total += len(want[i]) - 1
			}
			if len(sizes) == 0 || sizes[0] != n || slices.Max(sizes) != n {
				t.Errorf("decode steps of %v sequences, want the first of %d", sizes, n)
			}
			h := getHealth(t, ts.URL)
			batched := 0
			for _, k := range sizes {
				if k > 1 {
					batched++
				}
			}
			if h.Steps != int64(len(sizes)) || h.Batched != int64(batched) || h.Tokens != int64(total) {
				t.Errorf("/health %+v, want %d steps, %d batched, %d tokens", h, len(sizes), batched, total)
			}
		})
	}
}

// batchedPair is two completions on a server of two slots, the slot each
// took, and the second's request context on the server and its end.
type batchedPair struct {
	url          string
	slot1, slot2 int
	srvCtx2      context.Context
	cancel2      context.CancelFunc
	out1, out2   chan completed
	done2        chan error // the second's end (hooks.done)
}

// startPair starts two completions, the first on its slot before the
// second starts, so that the test knows which slot is whose; configure
// adds hooks.
func startPair(t *testing.T, body1, body2 map[string]any, configure func(s *Server)) *batchedPair {
	t.Helper()
	type acq struct {
		id  int
		ctx context.Context
	}
	acquired := make(chan acq, 2)
	p := &batchedPair{out1: make(chan completed, 1), out2: make(chan completed, 1), done2: make(chan error, 1)}
	var slot2 atomic.Int32
	slot2.Store(-1)
	f, ts, _ := newDecodeServer(t, 2, 64, func(s *Server) {
		var n atomic.Int32
		s.hooks.acquired = func(ctx context.Context, id int) {
			if n.Add(1) == 2 {
				slot2.Store(int32(id))
			}
			acquired <- acq{id, ctx}
		}
		s.hooks.done = func(slot int, err error, _ int) {
			if int32(slot) == slot2.Load() {
				p.done2 <- err
			}
		}
		configure(s)
	})
	f.readyForTest(t)
	p.url = ts.URL
	go func() { p.out1 <- complete(context.Background(), ts.URL, body1) }()
	a := recv(t, acquired, "first slot")
	ctx2, cancel2 := context.WithCancel(context.Background())
	t.Cleanup(cancel2)
	go func() { p.out2 <- complete(ctx2, ts.URL, body2) }()
	b := recv(t, acquired, "second slot")
	p.slot1, p.slot2, p.srvCtx2, p.cancel2 = a.id, b.id, b.ctx, cancel2
	return p
}

// TestCancelledSequenceLeavesBatch cancels one of two completions that
// share decode steps, once while it waits in the queue for the other
// (held between two tokens) and once while a step it was taken into
// runs: it ends with its context's error, and the other generates exactly
// what it does alone.
func TestCancelledSequenceLeavesBatch(t *testing.T) {
	body1, body2 := greedyReq("alpha beta", 10), greedyReq("gamma", 40)
	want := alone(t, body1)[0]
	const at = 4
	t.Run("queued", func(t *testing.T) {
		held, release := make(chan struct{}), make(chan struct{})
		queued := make(chan struct{})
		var p *batchedPair
		var slots sync.WaitGroup // p's slots are known before any token
		slots.Add(1)
		p = startPair(t, body1, body2, func(s *Server) {
			firstStepWaits(s, 2)
			s.hooks.token = func(_ context.Context, slot, n int) {
				slots.Wait()
				if slot == p.slot1 && n == at {
					close(held)
					<-release
				}
			}
			s.hooks.decodeQueued = chain(s.hooks.decodeQueued, func(slot, n int) {
				slots.Wait()
				if slot == p.slot2 && n == at {
					close(queued)
				}
			})
		})
		slots.Done()
		// The second is queued for its step, and the first, the other
		// member of every step so far, is held before its own token: no
		// step can run, and the second waits in the queue.
		recv(t, held, "first held")
		recv(t, queued, "second queued")
		p.cancel2()
		if err := recv(t, p.done2, "second's end"); !errors.Is(err, context.Canceled) {
			t.Errorf("the cancelled completion ended with %v", err)
		}
		close(release)
		if c := recv(t, p.out1, "first completion"); c.err != nil || !slices.Equal(c.tokens, want) {
			t.Errorf("beside a cancelled completion: %v %v, alone %v", c.tokens, c.err, want)
		}
		if c := recv(t, p.out2, "second's return"); c.err == nil {
			t.Error("the cancelled completion got a response")
		}
	})
	t.Run("in a step", func(t *testing.T) {
		held, release := make(chan struct{}), make(chan struct{})
		var steps, heldN atomic.Int32
		p := startPair(t, body1, body2, func(s *Server) {
			firstStepWaits(s, 2)
			s.hooks.step = func(n int) {
				if steps.Add(1) == at {
					heldN.Store(int32(n))
					close(held)
					<-release
				}
			}
		})
		recv(t, held, "a step of both")
		if n := heldN.Load(); n != 2 {
			t.Errorf("step %d holds %d sequences, want both", at, n)
		}
		p.cancel2()
		recv(t, p.srvCtx2.Done(), "the server seeing the client leave")
		close(release)
		if err := recv(t, p.done2, "second's end"); !errors.Is(err, context.Canceled) {
			t.Errorf("the cancelled completion ended with %v", err)
		}
		if c := recv(t, p.out1, "first completion"); c.err != nil || !slices.Equal(c.tokens, want) {
			t.Errorf("beside a cancelled completion: %v %v, alone %v", c.tokens, c.err, want)
		}
	})
}

func chain(a, b func(slot, n int)) func(slot, n int) {
	return func(slot, n int) {
		if a != nil {
			a(slot, n)
		}
		b(slot, n)
	}
}

// TestStalledSequenceDoesNotHoldOthers holds one generating completion
// between two tokens (a client that does not read, say) with the default
// patience: the other must still finish, and both generate what they do
// alone.
func TestStalledSequenceDoesNotHoldOthers(t *testing.T) {
	body1, body2 := greedyReq("alpha beta", 6), greedyReq("gamma", 12)
	want := alone(t, body1, body2)
	held, release := make(chan struct{}), make(chan struct{})
	var slots sync.WaitGroup
	slots.Add(1)
	var p *batchedPair
	p = startPair(t, body1, body2, func(s *Server) {
		s.hooks.token = func(_ context.Context, slot, n int) {
			slots.Wait()
			if slot == p.slot1 && n == 2 {
				close(held)
				<-release
			}
		}
	})
	slots.Done()
	recv(t, held, "first held")
	if c := recv(t, p.out2, "second completion while the first is held"); c.err != nil || !slices.Equal(c.tokens, want[1]) {
		t.Errorf("second: %v %v, alone %v", c.tokens, c.err, want[1])
	}
	close(release)
	if c := recv(t, p.out1, "first completion"); c.err != nil || !slices.Equal(c.tokens, want[0]) {
		t.Errorf("first: %v %v, alone %v", c.tokens, c.err, want[0])
	}
}

// TestStepErrorStaysWithItsSequence runs a shared step in which one
// state's context is full: that sequence gets the error, the other its
// logits as Eval gives them alone.
func TestStepErrorStaysWithItsSequence(t *testing.T) {
	f, _, m := newDecodeServer(t, 3, 8, nil)
	ctx := context.Background()
	ok, full, ref := f.states[0], f.states[1], f.states[2]
	for _, st := range []*llama.State{ok, ref} {
		if _, err := st.EvalBatch(ctx, []int{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := full.EvalBatch(ctx, []int{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	queued := make(chan struct{}, 2)
	var sizes []int
	h := &hooks{
		patience:     guard,
		decodeQueued: func(int, int) { queued <- struct{}{} },
		gather: func() {
			// Both are queued before the step takes the queue (the guard
			// only keeps a broken decoder from hanging the test).
			for range 2 {
				select {
				case <-queued:
				case <-time.After(guard):
				}
			}
		},
		step: func(n int) { sizes = append(sizes, n) },
	}
	d := newDecoder(m.NewDecoder(ok.Pool()), h)
	type res struct {
		logits []float32
		err    error
	}
	outOK, outFull := make(chan res, 1), make(chan res, 1)
	for _, c := range []struct {
		st  *llama.State
		out chan res
	}{{ok, outOK}, {full, outFull}} {
		go func() {
			q := d.join(c.st, 0)
			defer q.leave()
			l, err := q.eval(ctx, 9)
			c.out <- res{slices.Clone(l), err}
		}()
	}
	a, b := recv(t, outOK, "the good sequence"), recv(t, outFull, "the full sequence")
	want, _ := ref.Eval(9)
	if a.err != nil || !slices.Equal(a.logits, want) {
		t.Errorf("beside a full state: %v, logits equal to Eval's: %v", a.err, slices.Equal(a.logits, want))
	}
	if !errors.Is(b.err, llama.ErrContextExceeded) {
		t.Errorf("full state: %v", b.err)
	}
	if !slices.Equal(sizes, []int{2}) {
		t.Errorf("steps of %v sequences, want one of both", sizes)
	}
}
