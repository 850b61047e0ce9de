package grant_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"meshd/agent"
	"meshd/engine"
	"meshd/steward"
	"meshd/steward/grant"
	"meshd/steward/ledger"
	"meshd/wire"
)

// counting wraps a backend and counts the serves that reached it.
type counting struct {
	engine.Backend
	calls atomic.Int64
	fail  bool
}

func (c *counting) Serve(ctx context.Context, req wire.ServeRequest, prompt []byte) (engine.Result, error) {
	c.calls.Add(1)
	if c.fail {
		return engine.Result{}, errors.New("backend fault injected by the test")
	}
	return c.Backend.Serve(ctx, req, prompt)
}

const (
	ujPerToken = 1000
	// A request of 4 prompt words and 8 output tokens is estimated and
	// charged at 12 000 µJ under a ceiling of 20 000 µJ.
	ceilingUJ = 20_000
	chargeUJ  = 12 * ujPerToken
)

// stack is a whole serving agent over a receipt log and a grant ledger in
// dir, opened the way meshd opens them: the ledger reconciled from the
// receipts the log's scan visits.
type stack struct {
	dir     string
	log     *steward.Log
	led     *ledger.Ledger
	rec     *ledger.Recovery
	agent   *agent.Agent
	backend *counting
	key     *steward.Key
}

type stackOptions struct {
	trusted []ed25519.PublicKey
	require bool
	noAuth  bool
	work    int
	fail    bool
}

func stewardKey() *steward.Key {
	k, err := steward.NewKeyFromSeed(make([]byte, 32))
	if err != nil {
		panic(err)
	}
	return k
}

func openStack(dir string, o stackOptions) (*stack, error) {
	s := &stack{dir: dir, key: stewardKey()}
	var col ledger.Collector
	log, _, err := steward.OpenLog(filepath.Join(dir, "receipts"), steward.LogOptions{Trusted: s.key.Public(), Visit: col.Visit})
	if err != nil {
		return nil, err
	}
	s.log = log
	s.led, s.rec, err = ledger.Open(filepath.Join(dir, "ledger"), col.Charges(), ledger.Options{})
	if err != nil {
		log.Close()
		return nil, err
	}
	if o.work == 0 {
		o.work = 1
	}
	ref, err := engine.NewReference(engine.ReferenceConfig{Name: "ref", Fidelity: wire.F2, UJPerToken: ujPerToken, Work: o.work})
	if err != nil {
		s.close()
		return nil, err
	}
	s.backend = &counting{Backend: ref, fail: o.fail}
	cfg := agent.Config{
		Backends:     []engine.Backend{s.backend},
		Steward:      steward.New(s.key, log, steward.Options{}),
		RequireGrant: o.require,
	}
	if !o.noAuth {
		clock := func() time.Time { return t0 }
		cfg.Grants, err = grant.NewAuthoriser(grant.Config{Trusted: o.trusted, Ledger: s.led, Clock: clock})
		if err != nil {
			s.close()
			return nil, err
		}
	}
	s.agent, err = agent.New(cfg)
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *stack) close() error {
	return errors.Join(s.log.Close(), s.led.Close())
}

func mustStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	s, err := openStack(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.close() })
	return s
}

func request(tag string, floor wire.Fidelity) (wire.ServeRequest, []byte) {
	prompt := []byte(tag + " and three words")
	return wire.ServeRequest{
		PromptHash: wire.ContentOf(prompt), PromptTokens: 4, MaxTokens: 8,
		FidelityFloor: floor, JouleCeilingUJ: ceilingUJ,
	}, prompt
}

// debits sums the charged figures of the log's receipts on grant g and
// checks no hold is settled by two receipts.
func debits(t testing.TB, s *stack, g wire.ContentID) (sum uint64, receipts int) {
	t.Helper()
	holds := map[uint64]uint64{}
	_, err := steward.VerifyLogFile(filepath.Join(s.dir, "receipts"), s.key.Public(), func(o *steward.Opened) error {
		c, ok, err := ledger.ChargeOf(o.Receipt)
		if err != nil || !ok || c.Grant != g {
			return err
		}
		if prev, dup := holds[c.Hold]; dup {
			return fmt.Errorf("hold %d charged twice (receipts %d and %d)", c.Hold, prev, o.Receipt.Sequence)
		}
		holds[c.Hold] = o.Receipt.Sequence
		sum += c.ChargedUJ
		receipts++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sum, receipts
}

func TestConcurrentServesNeverOverdraw(t *testing.T) {
	issuer := key(t, 1)
	const budget, workers = 300_000, 64
	g := base()
	g.AnyRequest, g.BudgetUJ = true, budget
	g.NotBefore, g.Expires = g.NotBefore.AddDate(-10, 0, 0), g.Expires.AddDate(10, 0, 0)
	gr := issue(t, issuer, g)
	s := mustStack(t, stackOptions{trusted: []ed25519.PublicKey{issuer.Public()}})

	var served, refused atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, prompt := request(fmt.Sprint("worker-", i), wire.F1)
			resp, err := s.agent.ServeGranted(context.Background(), req, prompt, gr.Envelope)
			switch {
			case err == nil:
				served.Add(1)
				r := resp.Sealed.Receipt
				if r.GrantID == nil || *r.GrantID != gr.ID.String() || r.GrantHold == nil {
					t.Errorf("granted receipt lacks its grant: grant_id %v, x_grant_hold %v", r.GrantID, r.GrantHold)
				}
			case errors.Is(err, grant.ErrBudgetExhausted):
				refused.Add(1)
				if resp != nil {
					t.Error("a refused serve returned a response")
				}
			default:
				t.Errorf("serve: %v", err)
			}
		}()
	}
	wg.Wait()
	if served.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("served %d, refused %d: the budget should cover some but not all", served.Load(), refused.Load())
	}
	if calls := s.backend.calls.Load(); calls != served.Load() {
		t.Fatalf("the engine ran %d times for %d served requests: refused serves reached it", calls, served.Load())
	}
	b := mustBalance(t, s.led, gr.ID)
	sum, receipts := debits(t, s, gr.ID)
	if int64(receipts) != served.Load() {
		t.Fatalf("%d receipts for %d served", receipts, served.Load())
	}
	if sum != b.SpentUJ || sum != uint64(receipts)*chargeUJ {
		t.Fatalf("receipts debit %d µJ, the ledger spent %d µJ (%d receipts at %d)", sum, b.SpentUJ, receipts, chargeUJ)
	}
	if b.SpentUJ > budget || b.HeldUJ != 0 || b.OpenHolds != 0 || b.RemainingUJ != budget-b.SpentUJ {
		t.Fatalf("balance %+v", b)
	}
	t.Logf("concurrent: served %d, refused %d, spent %d of %d µJ", served.Load(), refused.Load(), b.SpentUJ, budget)

	// Settlements returned what the concurrent holds did not use; serving
	// on, one at a time, is refused exactly when the remainder no longer
	// covers a ceiling.
	for i := 0; ; i++ {
		rem := mustBalance(t, s.led, gr.ID).RemainingUJ
		req, prompt := request(fmt.Sprint("after-", i), wire.F1)
		_, err := s.agent.ServeGranted(context.Background(), req, prompt, gr.Envelope)
		if (err == nil) != (rem >= ceilingUJ) {
			t.Fatalf("with %d µJ remaining for a %d µJ ceiling the serve returned %v", rem, ceilingUJ, err)
		}
		if err != nil {
			if !errors.Is(err, grant.ErrBudgetExhausted) {
				t.Fatal(err)
			}
			break
		}
		served.Add(1)
	}
	b = mustBalance(t, s.led, gr.ID)
	if sum, receipts = debits(t, s, gr.ID); sum != b.SpentUJ || int64(receipts) != served.Load() || s.backend.calls.Load() != served.Load() {
		t.Fatalf("after the sequential serves: receipts debit %d µJ over %d receipts, ledger spent %d, %d served, %d engine calls",
			sum, receipts, b.SpentUJ, served.Load(), s.backend.calls.Load())
	}
	t.Logf("served %d, refused %d, spent %d of %d µJ", served.Load(), refused.Load(), b.SpentUJ, budget)
}

func TestFailedServesReleaseTheirHold(t *testing.T) {
	issuer := key(t, 1)
	g := base()
	g.AnyRequest = true
	gr := issue(t, issuer, g)
	for _, tc := range []struct {
		name      string
		fail      bool
		floor     wire.Fidelity
		wantCalls int64
		want      error
	}{
		{name: "engine fails", fail: true, floor: wire.F1, wantCalls: 1},
		{name: "no admissible backend", floor: wire.F4, want: agent.ErrNoRoute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mustStack(t, stackOptions{trusted: []ed25519.PublicKey{issuer.Public()}, fail: tc.fail})
			req, prompt := request("x", tc.floor)
			resp, err := s.agent.ServeGranted(context.Background(), req, prompt, gr.Envelope)
			if err == nil || resp != nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("serve: %v, %v", resp, err)
			}
			if got := s.backend.calls.Load(); got != tc.wantCalls {
				t.Fatalf("engine calls %d, want %d", got, tc.wantCalls)
			}
			b := mustBalance(t, s.led, gr.ID)
			if b.HeldUJ != 0 || b.SpentUJ != 0 || b.RemainingUJ != g.BudgetUJ {
				t.Fatalf("the failed serve kept its hold: %+v", b)
			}
			if s.log.Next() != 0 {
				t.Fatalf("a failed serve sealed %d receipts", s.log.Next())
			}
		})
	}
}

func TestGrantPolicy(t *testing.T) {
	issuer, stranger := key(t, 1), key(t, 2)
	g := base()
	g.AnyRequest = true
	gr := issue(t, issuer, g)
	trusted := []ed25519.PublicKey{issuer.Public()}

	t.Run("required and missing", func(t *testing.T) {
		s := mustStack(t, stackOptions{trusted: trusted, require: true})
		req, prompt := request("a", wire.F1)
		if _, err := s.agent.Serve(context.Background(), req, prompt); !errors.Is(err, agent.ErrGrantRequired) {
			t.Fatalf("ungranted serve: %v, want ErrGrantRequired", err)
		}
		if s.backend.calls.Load() != 0 || s.log.Next() != 0 {
			t.Fatal("an ungranted serve reached the engine or the log")
		}
		if _, err := s.agent.ServeGranted(context.Background(), req, prompt, gr.Envelope); err != nil {
			t.Fatalf("granted serve: %v", err)
		}
	})
	t.Run("untrusted grant refused before the engine", func(t *testing.T) {
		s := mustStack(t, stackOptions{trusted: trusted})
		req, prompt := request("a", wire.F1)
		bad := issue(t, stranger, g)
		if _, err := s.agent.ServeGranted(context.Background(), req, prompt, bad.Envelope); !errors.Is(err, grant.ErrUnknownIssuer) {
			t.Fatalf("serve: %v, want ErrUnknownIssuer", err)
		}
		if s.backend.calls.Load() != 0 || s.log.Next() != 0 {
			t.Fatal("a refused grant reached the engine or the log")
		}
	})
	t.Run("ungranted receipt omits grant fields", func(t *testing.T) {
		s := mustStack(t, stackOptions{trusted: trusted})
		req, prompt := request("a", wire.F1)
		resp, err := s.agent.Serve(context.Background(), req, prompt)
		if err != nil {
			t.Fatal(err)
		}
		if r := resp.Sealed.Receipt; r.GrantID != nil || r.GrantHold != nil {
			t.Fatalf("ungranted receipt carries grant_id %v / x_grant_hold %v", r.GrantID, r.GrantHold)
		}
		resp, err = s.agent.ServeGranted(context.Background(), req, prompt, gr.Envelope)
		if err != nil {
			t.Fatal(err)
		}
		r := resp.Sealed.Receipt
		if r.GrantID == nil || *r.GrantID != gr.ID.String() || r.GrantHold == nil {
			t.Fatalf("granted receipt: grant_id %v, x_grant_hold %v", r.GrantID, r.GrantHold)
		}
		if b := mustBalance(t, s.led, gr.ID); b.SpentUJ != chargeUJ || b.HeldUJ != 0 {
			t.Fatalf("balance %+v, want %d spent", b, chargeUJ)
		}
	})
	t.Run("grant presented to an agent with no issuers", func(t *testing.T) {
		s := mustStack(t, stackOptions{noAuth: true})
		req, prompt := request("a", wire.F1)
		if _, err := s.agent.ServeGranted(context.Background(), req, prompt, gr.Envelope); !errors.Is(err, agent.ErrGrantRequired) {
			t.Fatalf("serve: %v, want ErrGrantRequired", err)
		}
		if s.backend.calls.Load() != 0 {
			t.Fatal("the engine ran")
		}
	})
	t.Run("RequireGrant without an authoriser", func(t *testing.T) {
		if _, err := openStack(t.TempDir(), stackOptions{noAuth: true, require: true}); err == nil {
			t.Fatal("accepted")
		}
	})
}

// A serve can cost more than its ceiling (here the prompt has more words
// than it declared): the receipt charges the real figure, the grant is
// debited only the ceiling it held, and the budget is never overdrawn.
func TestOverrunDebitsAtMostTheCeiling(t *testing.T) {
	issuer := key(t, 1)
	g := base()
	g.AnyRequest, g.BudgetUJ = true, ceilingUJ
	gr := issue(t, issuer, g)
	s := mustStack(t, stackOptions{trusted: []ed25519.PublicKey{issuer.Public()}})
	prompt := []byte("a prompt that declares four tokens but carries rather more than twelve words of text")
	req := wire.ServeRequest{PromptHash: wire.ContentOf(prompt), PromptTokens: 4, MaxTokens: 8, FidelityFloor: wire.F1, JouleCeilingUJ: ceilingUJ}
	resp, err := s.agent.ServeGranted(context.Background(), req, prompt, gr.Envelope)
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Sealed.Receipt
	e, _ := r.Energy()
	if e.UJ() <= ceilingUJ {
		t.Fatalf("test setup: the serve charged %d µJ, not above the %d µJ ceiling", e.UJ(), ceilingUJ)
	}
	if r.GrantDebitUJ == nil || *r.GrantDebitUJ != ceilingUJ {
		t.Fatalf("x_grant_debit_uj = %v, want the ceiling %d", r.GrantDebitUJ, ceilingUJ)
	}
	b := mustBalance(t, s.led, gr.ID)
	if b.SpentUJ != ceilingUJ || b.RemainingUJ != 0 || b.SpentUJ > g.BudgetUJ {
		t.Fatalf("balance after an overrun: %+v", b)
	}
	if sum, _ := debits(t, s, gr.ID); sum != b.SpentUJ {
		t.Fatalf("receipts debit %d, ledger spent %d", sum, b.SpentUJ)
	}
}
