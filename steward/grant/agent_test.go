package grant_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	// steward seals the receipts and names this steward in grants; nil
	// means stewardKey().
	steward *steward.Key
	// authFor, if set, is the steward id the authoriser is built for
	// instead of the steward's own.
	authFor ed25519.PublicKey
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
	s := &stack{dir: dir, key: o.steward}
	if s.key == nil {
		s.key = stewardKey()
	}
	// Checkpoints and ledger snapshots come often, so that every crash and
	// restart below also crosses them.
	st, err := grant.OpenStores(context.Background(), filepath.Join(dir, "receipts"), filepath.Join(dir, "ledger"), s.key,
		steward.LogOptions{CheckpointEvery: 3}, ledger.Options{CompactEvery: 4, Clock: func() time.Time { return t0 }})
	if err != nil {
		return nil, err
	}
	log := st.Log
	s.log, s.led, s.rec = log, st.Ledger, st.Recovery
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
		self := s.key.Public()
		if o.authFor != nil {
			self = o.authFor
		}
		cfg.Grants, err = grant.NewAuthoriser(grant.Config{Steward: self, Trusted: o.trusted, Ledger: s.led, Clock: clock})
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
	_, err := steward.VerifyLog(context.Background(), filepath.Join(s.dir, "receipts"), steward.VerifyOptions{Trusted: s.key.Public(), Visit: func(o *steward.Opened) error {
		c, ok, err := grant.ChargeOf(o.Receipt)
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
	}})
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
	t.Run("authoriser for another steward", func(t *testing.T) {
		if _, err := openStack(t.TempDir(), stackOptions{trusted: trusted, authFor: stranger.Public()}); err == nil ||
			!strings.Contains(err.Error(), "grant authoriser is for steward") {
			t.Fatalf("an agent took an authoriser for another steward id: %v", err)
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

// Two stewards that trust one issuer keep separate ledgers, so a grant
// either could honour would be spent in full at each (one 40 000 µJ grant
// once yielded 48 000 µJ at two stewards). A grant names its audience: the
// other steward refuses it before touching its ledger or engine.
func TestAudienceClosesTheTwoStewardDoubleSpend(t *testing.T) {
	issuer := key(t, 1)
	stewardA, stewardB := key(t, 5), key(t, 6)
	trusted := []ed25519.PublicKey{issuer.Public()}
	a := mustStack(t, stackOptions{steward: stewardA, trusted: trusted})
	b := mustStack(t, stackOptions{steward: stewardB, trusted: trusted})

	// Two ceilings' worth: each steward serves twice at 12 000 µJ, then
	// the 16 000 µJ left no longer covers a ceiling.
	const budget = 2 * ceilingUJ
	g := base()
	g.AnyRequest, g.BudgetUJ = true, budget
	g.Audience = []ed25519.PublicKey{stewardA.Public()}
	forA := issue(t, issuer, g)
	g.Audience = []ed25519.PublicKey{stewardB.Public()}
	forB := issue(t, issuer, g)

	// spend serves on env at s until the first refusal.
	spend := func(s *stack, env []byte, tag string) (debited uint64, served int, refusal error) {
		t.Helper()
		for i := 0; i < 10; i++ {
			req, prompt := request(fmt.Sprint(tag, i), wire.F1)
			resp, err := s.agent.ServeGranted(ctx, req, prompt, env)
			if err != nil {
				return debited, served, err
			}
			debited += *resp.Sealed.Receipt.GrantDebitUJ
			served++
		}
		t.Fatalf("%s: ten serves on a %d µJ grant", tag, budget)
		return
	}
	ledgerSize := func(s *stack) int64 {
		st, err := os.Stat(filepath.Join(s.dir, "ledger"))
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}

	type stewardSide struct {
		name    string
		s       *stack
		own     *grant.Signed
		foreign *grant.Signed
		self    *steward.Key
		owner   *steward.Key
	}
	for _, side := range []stewardSide{
		{"A", a, forA, forB, stewardA, stewardB},
		{"B", b, forB, forA, stewardB, stewardA},
	} {
		// The foreign grant first, on a fresh steward: it must leave no
		// trace, not even an account.
		size, calls := ledgerSize(side.s), side.s.backend.calls.Load()
		_, served, err := spend(side.s, side.foreign.Envelope, "foreign-"+side.name)
		if served != 0 || !errors.Is(err, grant.ErrWrongAudience) {
			t.Fatalf("steward %s served %d on a grant for the other steward, then: %v; want ErrWrongAudience", side.name, served, err)
		}
		if !strings.Contains(err.Error(), side.owner.ID()) || !strings.Contains(err.Error(), side.self.ID()) {
			t.Errorf("the refusal does not name both stewards: %v", err)
		}
		if _, ok := side.s.led.Balance(side.foreign.ID); ok {
			t.Errorf("steward %s opened an account for a grant not addressed to it", side.name)
		}
		if ledgerSize(side.s) != size || side.s.backend.calls.Load() != calls || side.s.log.Next() != 0 {
			t.Errorf("steward %s: the refused grant reached the ledger, the engine or the log", side.name)
		}

		// Its own grant works, up to its budget and no further.
		debited, served, err := spend(side.s, side.own.Envelope, "own-"+side.name)
		if !errors.Is(err, grant.ErrBudgetExhausted) || served != 2 || debited != 2*chargeUJ {
			t.Fatalf("steward %s on its own grant: served %d, debited %d µJ, then %v", side.name, served, debited, err)
		}
		if bal := mustBalance(t, side.s.led, side.own.ID); bal.SpentUJ != debited || bal.RemainingUJ != budget-debited {
			t.Fatalf("steward %s balance %+v after debiting %d µJ", side.name, bal, debited)
		}
	}

	// Across both stewards each grant was spent once: never more than its
	// budget in total.
	for _, gr := range []*grant.Signed{forA, forB} {
		var total uint64
		for _, s := range []*stack{a, b} {
			sum, _ := debits(t, s, gr.ID)
			total += sum
		}
		if total != 2*chargeUJ || total > budget {
			t.Fatalf("grant %s: %d µJ debited across two stewards, budget %d", gr.ID, total, budget)
		}
	}
}
